"""Decoupled VFL (Amalanshu, Sirvi, Inouye, arXiv 2403.03871) as a method package.

- `nets`: the networks, the hosts' registers and the losses;
- `messages`: the typed calls and answers of its steps;
- `steps`: its five steps (schemas and party-side handlers), called through the generic Step;
- `roles`: what a party keeps of it (its guest, host replica and, at the owner, the classifier);
- `program`: the coordinator's schedule of its rounds;
- `spec`: its MethodSpec, which vfl_core.methods.registry registers.
"""
