"""A kopf operator, as its users write them, for tests/operators.rs: Widgets get a ConfigMap-free
status, an event, and kopf's finalizer (there is a deletion handler); a deleted Widget leaves a file
named after it in $WIDGET_DONE_DIR."""

import os

import kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    # Quick reactions for a test; the defaults wait longer between retries and watch restarts.
    settings.watching.server_timeout = 30
    settings.posting.level = 0


@kopf.on.create("ops.example.com", "v1", "widgets")
def created(spec, name, patch, body, **_):
    size = int(spec.get("size", 1))
    patch.status["phase"] = "Ready"
    patch.status["parts"] = size * 2
    kopf.info(body, reason="Assembled", message=f"widget {name} has {size * 2} parts")
    return {"observedSize": size}


@kopf.on.update("ops.example.com", "v1", "widgets", field="spec.size")
def resized(new, name, patch, body, **_):
    patch.status["parts"] = int(new) * 2
    kopf.info(body, reason="Resized", message=f"widget {name} now has {int(new) * 2} parts")


@kopf.on.delete("ops.example.com", "v1", "widgets")
def deleted(name, namespace, **_):
    with open(os.path.join(os.environ["WIDGET_DONE_DIR"], f"{namespace}.{name}"), "w") as f:
        f.write("deleted\n")
