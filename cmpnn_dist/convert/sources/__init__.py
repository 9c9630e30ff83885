"""``data.source``: the registry of dataset sources (:mod:`.base`), one module per source.

Built in (module of this package):

    tsv:transductive             train / valid / test TSV files  (tsv_transductive.py)
    tsv:inductive                GraIL's X_v1 + X_v1_ind          (tsv_inductive.py)
    ogb:biokg                    OGB's ogbl-biokg                 (ogb_biokg.py)
    hetionet                     hetio's files, PyKEEN's split    (hetionet.py)
    synthetic:rule_kg            rule-planted KG (the default)    (rule_kg.py)
    synthetic:rule_kg_inductive  its inductive variant            (rule_kg_inductive.py)
    synthetic:trisqr             TRI-SQR, the paper's appendix    (trisqr.py)
    synthetic:biokg_scale        ogbl-biokg's size and types      (biokg_scale.py)
    synthetic:biokg_rules        rules planted in biokg's shape   (biokg_rules.py)
    synthetic:hetionet_schema    Hetionet's schema                (hetionet_schema.py)

Each module registers itself with :func:`register_source`; every module of this package is
imported below, so a new source is one new file (``docs/extending.md``).
"""

import importlib
import pkgutil

from cmpnn_dist.convert.sources.base import BuildSpec, Source, get, names, register_source
from cmpnn_dist.convert.sources.files import SourceMissing

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["BuildSpec", "Source", "SourceMissing", "get", "names", "register_source"]
