"""Benchmarks of the paper's comparisons on our engine: accuracy grid, scaling, throughput.

The `vfl bench` commands (vfl_cli/bench_cmd.py; their shared options and sweep parsing in
vfl_cli/bench_options.py) are thin wrappers around these modules. Results are recorded under
benchmarks/results/.
"""
