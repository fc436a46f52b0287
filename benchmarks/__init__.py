"""The benchmark suites behind `vfl bench`, one folder or family of modules each: paper/ (the
LASER-VFL paper's comparisons), scale/ (parties and throughput), dvfl/, dlvm/, tabular/, wan/,
serve/ (its callers in serve_callers, standard library only), privacy/; what they share: setups
(the fixed setups and the reports' tables and plots), pool, procs, netshape.

The `vfl bench` commands (vfl_cli/bench_cmd.py, bench_suites.py, bench_wan.py,
bench_privacy.py; their shared options in vfl_cli/bench_options.py) are thin wrappers around
these modules. Results are recorded under benchmarks/results/.
"""
