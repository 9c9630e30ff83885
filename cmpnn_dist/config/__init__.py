"""Typed configuration: the schema of every YAML in ``conf/``, its registries and its checks.

The package, the base layer of ``docs/design.md`` (it imports nothing of the package but
:mod:`cmpnn_dist.errors`):

* :mod:`.options` -- the ``Literal`` option types (the one list of each choice's values) and the
  field helpers ``option`` / ``number`` that attach them and numeric bounds to a field;
* :mod:`.schema` -- the dataclasses (:class:`Config` is the root), their Hydra ConfigStore
  registration (:func:`register_configs`) and :func:`config_to_dict`;
* :mod:`.environment` -- what the defaults read from the environment (the storage root);
* :mod:`.registry` -- the plugin registries: choice values (:func:`register_choice`) and config
  rules (:func:`register_check`) added by the layers below, whose packages each registry
  imports by name the first time it is asked;
* :mod:`.validation` -- :func:`validate` and the cross-field rules; :class:`ConfigError`;
* :mod:`.keys` -- the declared dotted keys and the check of an override's key (``+key``).

Every public name of the first five is re-exported here: ``from cmpnn_dist.config import
Config, validate``.
"""

from cmpnn_dist.config.environment import ENV_STORAGE_ROOT, default_storage_root
from cmpnn_dist.config.options import (
    Aggregate,
    Backend,
    DataSource,
    Device,
    EdgeRemoval,
    EvalFilter,
    Family,
    History,
    HitsNegativesRule,
    Init,
    InitNoise,
    LrSchedule,
    Message,
    ModelPrior,
    Negatives,
    OpsImpl,
    Precision,
    Propagation,
    Protocol,
    PruneGate,
    PrunePriority,
    PruneUnvisited,
    Readout,
    ReadoutPool,
    Split,
    Ties,
    choices,
    number,
    option,
)
from cmpnn_dist.config.registry import (
    CHECK_PLUGINS,
    CHOICE_PLUGINS,
    allowed_values,
    load_plugins,
    register_check,
    register_choice,
    registered_checks,
)
from cmpnn_dist.config.schema import (
    CheckpointConfig,
    ClusterConfig,
    Config,
    DataConfig,
    EvalConfig,
    ModelConfig,
    OpsConfig,
    PruneConfig,
    TrainConfig,
    config_to_dict,
    register_configs,
)
from cmpnn_dist.config.validation import (
    RETIRED_CHOICES,
    SAVED_CHOICE_NAMES,
    ConfigError,
    check_model,
    check_store_name,
    model_conflict,
    validate,
    validate_section,
)

__all__ = [
    "CHECK_PLUGINS",
    "CHOICE_PLUGINS",
    "ENV_STORAGE_ROOT",
    "RETIRED_CHOICES",
    "SAVED_CHOICE_NAMES",
    "Aggregate",
    "Backend",
    "CheckpointConfig",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "DataSource",
    "Device",
    "EdgeRemoval",
    "EvalConfig",
    "EvalFilter",
    "Family",
    "History",
    "HitsNegativesRule",
    "Init",
    "InitNoise",
    "LrSchedule",
    "Message",
    "ModelConfig",
    "ModelPrior",
    "Negatives",
    "OpsConfig",
    "OpsImpl",
    "Precision",
    "Propagation",
    "Protocol",
    "PruneConfig",
    "PruneGate",
    "PrunePriority",
    "PruneUnvisited",
    "Readout",
    "ReadoutPool",
    "Split",
    "Ties",
    "TrainConfig",
    "allowed_values",
    "check_model",
    "check_store_name",
    "choices",
    "config_to_dict",
    "default_storage_root",
    "load_plugins",
    "model_conflict",
    "number",
    "option",
    "register_check",
    "register_choice",
    "register_configs",
    "registered_checks",
    "validate",
    "validate_section",
]
