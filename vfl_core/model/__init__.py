"""The networks a party trains (representation models, heads) and their wire rounding."""
