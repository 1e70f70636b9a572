"""What every resolver shares: the context, the loaders, pagination and the mutation runner."""
