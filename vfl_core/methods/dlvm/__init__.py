"""The latent-variable VFL (DLVM-VFL) as a method package.

- `latent_math`, `models`: the bound, the posterior and the networks;
- `messages`: the typed calls and answers of its steps;
- `steps`: its five steps (schemas and party-side handlers), called through the generic Step;
- `roles`: what a party keeps of it (its expert, decoder and, at the active party, the
  classifier);
- `program`: the coordinator's schedule of its rounds;
- `config`, `spec`: its configuration and its MethodSpec, which vfl_core.methods.registry
  registers.
"""
