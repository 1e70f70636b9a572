"""What the schema runs on, whatever the domain: the executor, read-ahead, parse cache, limits, input text, view policies, errors."""
