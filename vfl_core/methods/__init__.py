"""Methods as plug-ins: what a method that brings its own phases declares, and the checks the
generic step makes before any of its code runs.

- `record`: what one step carries (a header of round, split, rows and digest; named tensors,
  named maps of tensors by block, small typed scalars);
- `schema`: the names, dtypes, symbolic shapes and value ranges a step allows, and the one
  function that checks a record against them;
- `steps`: a step of a method (its schemas, its party-side handler, its deadline phase) and
  the packing between a step's typed call and its record, derived from the schema;
- `dvfl/`, `dlvm/`: the methods that use it (spec, party side, round program).

The registry of methods by name is `vfl_core.methods.registry`.
"""
