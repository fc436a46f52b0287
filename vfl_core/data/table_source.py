"""Where a tabular party's rows are and how to read them: the options of a table party, below
vfl_core.data.tabular (which reads it) and the modules that check and choose its columns."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from vfl_core.data.learning_task import CLASSIFICATION, Task
from vfl_core.data.preprocess import DEFAULT_MAX_ONEHOT

DEFAULT_TEST_FRACTION = 0.2
DEFAULT_DATASET = "tabular"


class TableSource(BaseModel):
    """Where a tabular party's rows are and how to read them (the CLIs' options)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    id_column: str
    label_column: str | None = None  # None: a feature-only party
    features: tuple[str, ...] | None = None  # None: every column but the ID and label
    ignore_columns: tuple[str, ...] = ()  # left out of the features (not with `features`)
    categorical: tuple[str, ...] = ()  # categories whatever their cells (codes written as numbers)
    test_path: Path | None = None  # None: split `path` by ID hash with test_fraction
    test_fraction: float = Field(DEFAULT_TEST_FRACTION, ge=0, lt=1)
    block: int = Field(ge=0)
    num_blocks: int = Field(ge=1)
    # Every party of a federation declares the same task; regression labels are real numbers.
    task: Task = CLASSIFICATION
    # Classification: must equal the label parties' class count; a label party takes it from its
    # labels. Regression has one output and takes none.
    num_classes: int | None = Field(None, ge=2)
    dataset: str = DEFAULT_DATASET  # every party of a federation must use the same name
    max_onehot: int = Field(DEFAULT_MAX_ONEHOT, ge=1)
    # A binary label's positive class (index 1: what F1, AUC, Brier and the threshold are
    # about); None: the class that sorts last ("yes" of no/yes, "1" of 0/1).
    positive_class: str | None = None
