"""The dynamic config store of an appliance alone: one JSON file next to the catalog.

`<first log dir>/.klog-catalog/dynamic-configs.json`, written atomically on every change, read
at start, so a restart keeps what AlterConfigs (or the quotas' APIs) set. The supervisor's
loop owns it; workers learn its contents over the control channel (`DynamicConfigs`).
A fleet's store has the same interface over ZooKeeper (`cluster.config_store`).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from appliance.atomic_files import write_atomically
from appliance.control.catalog import CATALOG_DIR
from appliance.control.dynamic_configs import Changes, Entities, changed, check_entity_type

FILE_NAME = "dynamic-configs.json"


class LocalConfigStore:
    def __init__(self, root: Path):
        self.path = Path(root) / CATALOG_DIR / FILE_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.generation = 0
        try:
            raw = orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            raw = {}
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ValueError(f"{self.path}: not a dynamic config file: {exc}") from None
        self._entities: Entities = {
            str(t): {str(n): {str(k): str(v) for k, v in c.items()} for n, c in names.items()}
            for t, names in raw.items()}

    def entities(self) -> Entities:
        return {t: {n: dict(c) for n, c in names.items()} for t, names in self._entities.items()}

    def alter(self, entity_type: str, name: str, changes: Changes) -> None:
        """Apply `changes` to one entity and write the file before answering. Raises
        ValueError (a type the store does not keep), OSError (the disk)."""
        check_entity_type(entity_type)
        entities = self.entities()
        names = entities.setdefault(entity_type, {})
        new = changed(names.get(name, {}), changes)
        if new == names.get(name, {}):
            return
        if new:
            names[name] = new
        else:
            names.pop(name, None)
        if not names:
            entities.pop(entity_type)
        write_atomically(self.path, orjson.dumps(entities, option=orjson.OPT_INDENT_2
                                                 | orjson.OPT_SORT_KEYS))
        self._entities = entities
        self.generation += 1
