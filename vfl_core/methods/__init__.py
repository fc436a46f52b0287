"""The training methods, one folder each, and what every method shares (the methods layer of
docs/architecture.md: above data and model, below config, inference and training).

What every method shares:
- `spec`: what a method is, as data (`MethodSpec`), its round program and hooks, and the
  subset helpers (`active_party`, `owner`, ...);
- `registry`: the methods by name (`REGISTRY`, `method_spec`, `register` for plug-ins named in
  VFL_METHOD_MODULES);
- `combination`: the heads' answers for a batch into the federation's, by the spec's rule.

What a method that brings its own phases declares, and the checks the generic step makes before
any of its code runs:
- `record`: what one step carries (a header of round, split, rows and digest; named tensors,
  named maps of tensors by block, small typed scalars);
- `schema`: the names, dtypes, symbolic shapes and value ranges a step allows, and the one
  function that checks a record against them;
- `steps`: a step of a method (its schemas, its party-side handler, its deadline phase) and
  the packing between a step's typed call and its record, derived from the schema.

The methods: `laser/` (LASER-VFL and its baselines, on the engine's Embed/Fuse/Backward),
`dvfl/` and `dlvm/` (spec, party side, round program of their own).
"""
