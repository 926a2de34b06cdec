"""The collector and a long-lived process's start-up heap."""

import gc


def freeze_startup_heap() -> None:
    """Leave the objects the process holds at start-up out of the collector's full passes.

    Call once, after imports and set-up, before the process starts its work. A web worker or a
    watcher holds a large heap that lives as long as it does (Django, the URLs, the validators,
    the Kubernetes client's models: 100,000-150,000 objects). Work that allocates now and then
    triggers a full collection, which walks that whole heap: 40-140 ms on the 2-core machines,
    with every thread stopped in the middle of a request or a batch. Frozen (``gc.freeze``),
    the start-up heap is never walked again; garbage made before is collected first.
    """
    gc.collect()
    gc.freeze()
