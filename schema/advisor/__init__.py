"""The App Advisor's types, inputs, payloads and its parts of the roots."""
