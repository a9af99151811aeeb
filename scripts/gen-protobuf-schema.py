#!/usr/bin/env python3
"""Generate crates/apimachinery/src/serializer/protobuf/schema.txt.

The Kubernetes protobuf wire format is described by upstream's generated.proto files. The k8s-pb crate
carries prost code generated from exactly those files (tags, wire types, messages), but prost turns the
proto field names (which upstream takes from the JSON names) into snake_case. The JSON names come back
from k8s-openapi, whose generated deserializers list every JSON key of every type. This script joins the
two and writes one compact text table the codec loads at start-up.

Run after bumping k8s-pb or k8s-openapi: `python3 scripts/gen-protobuf-schema.py`.
Output format (one item per line):
    message <path>                      a message, e.g. api.core.v1.Pod
    <tag> <jsonName> <o|r|i> <type>     a field: optional, repeated or inline (an embedded struct whose
                                        fields the JSON form flattens into the parent); type is a scalar
                                        or a message path
    <tag> <jsonName> m <keytype> <valuetype>   a map field
    kind <apiVersion> <Kind> <path>     a top-level kind and its message
"""
import glob
import os
import re
import sys

HOME = os.path.expanduser("~")
REGISTRY = glob.glob(os.path.join(HOME, ".cargo/registry/src/*/"))


def crate_dir(name):
    found = sorted(d for r in REGISTRY for d in glob.glob(os.path.join(r, name)))
    if not found:
        sys.exit(f"{name} not found in the cargo registry; run `cargo fetch` first")
    return found[-1]


PB = crate_dir("k8s-pb-0.9.0")
OPENAPI = crate_dir("k8s-openapi-0.29.*")
OUT = os.path.join(os.path.dirname(__file__), "..", "crates/apimachinery/src/serializer/protobuf/schema.txt")


def norm(name):
    return re.sub(r"[^a-z0-9]", "", name.lower())


def openapi_json_names():
    """(module, lowercased struct) -> {normalized snake name: json name}, merged over every k8s version."""
    names = {}
    for version_dir in sorted(glob.glob(os.path.join(OPENAPI, "src", "v1_*"))):
        for path in glob.glob(os.path.join(version_dir, "**", "*.rs"), recursive=True):
            rel = os.path.relpath(os.path.dirname(path), version_dir)
            module = rel.replace(os.sep, ".")
            text = open(path).read()
            for struct in re.findall(r"^pub struct (\w+)", text, re.M):
                entry = names.setdefault((module, struct.lower()), {})
                for json_name, snake in re.findall(r'"([A-Za-z0-9_$\-]+)" => Field::Key_(\w+)', text):
                    entry[norm(snake)] = json_name
                    entry[norm(json_name)] = json_name
    return names


def lower_camel(snake):
    parts = snake.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


SCALARS = {"string", "bool", "int32", "int64", "double", "bytes", "float", "uint32", "uint64"}


def resolve(module, rust_type):
    """Turn a prost type path (relative with super::) into a dotted message path."""
    parts = rust_type.split("::")
    base = module.split(".")
    while parts and parts[0] == "super":
        base = base[:-1]
        parts = parts[1:]
    return ".".join(base + parts)


def inner_type(rust_type):
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"):
        if rust_type.startswith(wrapper):
            return inner_type(rust_type[len(wrapper):-1].strip().rstrip(",").strip())
    return rust_type


def parse_pb():
    messages, kinds, warnings = {}, [], []
    json_names = openapi_json_names()
    for path in sorted(glob.glob(os.path.join(PB, "src", "**", "mod.rs"), recursive=True)):
        module = os.path.relpath(os.path.dirname(path), os.path.join(PB, "src")).replace(os.sep, ".")
        lines = []
        for raw_line in open(path):
            line = raw_line.strip()
            # rustfmt wraps long field types onto the following lines: join them back.
            last = lines[-1] if lines else ""
            open_type = last.count("<") > last.count(">")
            if last.startswith("pub ") and (open_type or not last.endswith((",", "{", "}", ";"))):
                lines[-1] += (" " if lines[-1].endswith(":") else "") + line
            else:
                lines.append(line)
        current = None
        attr = None
        resource = None
        for line in lines:
            if line.startswith("///") or line.startswith("//"):
                continue
            m = re.match(r"pub struct (\w+) \{", line)
            if m:
                current = f"{module}.{m.group(1)}"
                messages[current] = []
                known = json_names.get((module, m.group(1).lower()), {})
                continue
            if current and line == "}":
                current = None
                continue
            m = re.match(r"#\[prost\((.*)\)\]$", line)
            if m and current:
                attr = m.group(1)
                continue
            m = re.match(r"pub (?:r#)?(\w+): (.*),$", line)
            if m and current and attr:
                snake, rust_type = m.group(1), m.group(2)
                tag = re.search(r'tag = "(\d+)"', attr).group(1)
                json_name = known.get(norm(snake))
                kind = attr.split(",")[0].strip()
                # A message field k8s-openapi does not know is an embedded Go struct (`json:",inline"`):
                # its fields appear in the parent's JSON object.
                inline = json_name is None and bool(known) and kind == "message"
                if json_name is None:
                    json_name = lower_camel(snake)
                    if known and not inline:
                        warnings.append(f"{current}.{snake}: no JSON name in k8s-openapi, using {json_name}")
                map_match = re.match(r'btree_map = "(\w+), (\w+)"', attr)
                if map_match:
                    key, value = map_match.groups()
                    if value == "message":
                        value_rust = re.search(r"BTreeMap<\s*[^,]+,\s*(.*?),?\s*>$", rust_type).group(1)
                        value = resolve(module, value_rust)
                    messages[current].append(f"{tag} {json_name} m {key} {value}")
                else:
                    label = "r" if "repeated" in attr else ("i" if inline else "o")
                    if kind.startswith("bytes"):
                        kind = "bytes"
                    if kind == "message":
                        kind = resolve(module, inner_type(rust_type))
                    elif kind not in SCALARS:
                        sys.exit(f"unknown prost kind {kind} in {current}")
                    messages[current].append(f"{tag} {json_name} {label} {kind}")
                attr = None
                continue
            m = re.match(r"impl crate::Resource for (\w+) \{", line)
            if m:
                resource = {"message": f"{module}.{m.group(1)}"}
                continue
            if resource is not None:
                m = re.match(r'const (API_VERSION|KIND): &\'static str = "(.*)";', line)
                if m:
                    resource[m.group(1)] = m.group(2)
                if "API_VERSION" in resource and "KIND" in resource:
                    kinds.append((resource["API_VERSION"], resource["KIND"], resource["message"]))
                    list_message = resource["message"] + "List"
                    kinds.append((resource["API_VERSION"], resource["KIND"] + "List", list_message))
                    resource = None
    kinds = [k for k in kinds if k[2] in messages]
    return messages, sorted(set(kinds)), warnings


# Kinds that upstream promoted to a version after the k8s-pb release we use: (group, from, to, kinds).
# A promotion keeps the protobuf tags, so the older version's messages are copied under the new package;
# messages the new package already has (shared types like MatchResources) are used as they are.
PROMOTED = [
    ("admissionregistration", "v1beta1", "v1", ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]),
]


def promote(messages, kinds):
    for group, old, new, promoted_kinds in PROMOTED:
        old_pkg, new_pkg = f"api.{group}.{old}.", f"api.{group}.{new}."
        group_name = {"admissionregistration": "admissionregistration.k8s.io"}[group]
        copied = {}
        for name, fields in messages.items():
            if name.startswith(old_pkg):
                target = new_pkg + name[len(old_pkg):]
                if target not in messages:
                    copied[target] = fields
        for target, fields in copied.items():
            rewritten = []
            for field in fields:
                parts = field.split(" ")
                parts = [
                    new_pkg + p[len(old_pkg):] if p.startswith(old_pkg) and (new_pkg + p[len(old_pkg):]) in (messages.keys() | copied.keys()) else p
                    for p in parts
                ]
                rewritten.append(" ".join(parts))
            messages[target] = rewritten
        for kind in promoted_kinds:
            for k in (kind, kind + "List"):
                kinds.append((f"{group_name}/{new}", k, new_pkg + k))
    return messages, sorted(set(kinds))


def main():
    messages, kinds, warnings = parse_pb()
    messages, kinds = promote(messages, kinds)
    out = ["# Generated by scripts/gen-protobuf-schema.py from k8s-pb and k8s-openapi. Do not edit."]
    for name in sorted(messages):
        out.append(f"message {name}")
        out.extend(messages[name])
    for api_version, kind, message in kinds:
        out.append(f"kind {api_version} {kind} {message}")
    with open(OUT, "w") as f:
        f.write("\n".join(out) + "\n")
    for w in warnings:
        print("warning:", w, file=sys.stderr)
    print(f"{len(messages)} messages, {len(kinds)} kinds -> {os.path.normpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
