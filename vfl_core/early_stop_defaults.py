"""Early stopping's defaults where the config leaves them to the data (TrainConfig.patience,
TrainConfig.min_epochs, vfl_core.training.train_rows). vfl_core.config re-exports them; the
tabular sweep patches them there (benchmarks/tabular/sweep.py)."""

# Early stopping's patience when the config leaves it to the data (TrainConfig.patience), and
# the validation samples it then needs: on a smaller split the watched metric is mostly noise and
# stopped too early (docs/tabular-defaults.md: breast cancer, 47 validation samples). 6 epochs
# of about AUTO_ROUNDS_PER_EPOCH rounds, each of which must beat the last that restarted it by
# TrainConfig.early_stop_min_improvement (docs/tabular-defaults.md, "Time to a model").
AUTO_PATIENCE = 6
# ... and with bounded staleness (TrainConfig.staleness > 0): a stale run's validation metric
# bumps in its first epochs (a party's embeddings miss up to S rounds of its own updates while
# the rate is highest), and 6 epochs stopped friedman's stale runs on their first or second
# epoch (RMSE 3.14 against 2.52 exact); 10 measured within the exact runs' sd on every table
# (benchmarks/results/tabular.md, `tabular-sweep-stale`), and under the tables' staleness 5 with
# the own tower exact 8 within the sd of 10 on every table in fewer rounds
# (`tabular-sweep-stale-p8`).
AUTO_STALE_PATIENCE = 8
# ... and no stop before twice that: a stale run's validation can stall for ten epochs and then
# improve (friedman, gen_categorical: `tabular-vertibench-min-epochs`; Keras's start_from_epoch)
AUTO_STALE_MIN_EPOCHS = 2 * AUTO_STALE_PATIENCE
AUTO_MIN_VALIDATION = 100
# ... and where the default is off for want of those samples (a small table, patience unset):
# training ends after this many epochs, `--epochs` still the ceiling. With no validation to stop
# on, all 60 epochs of the ceiling ran: on VertiBench's diabetes cells and the sweep's small
# tables 30 scored as 60 did, in half the rounds (docs/tabular-defaults.md, "Small tables").
AUTO_SMALL_EPOCHS = 30
