"""The federation at work: a party, the round engine and its pipeline, alignment (PSI), liveness,
injected faults, early stopping and the in-process transport."""
