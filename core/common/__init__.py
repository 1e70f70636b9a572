"""What every domain shares: errors, ids, names, secrets, the event bus, the loop kit, metrics, live-call budgets, the caller (rbac) and the unit of work (services)."""
