#!/usr/bin/env bash
# Which code of an rkube binary is resident in an idle `rkube server --disable-kubelet` (issue 25's
# idle RSS): starts it, waits for /readyz + 30 s, reads /proc/PID/pagemap for the binary's executable
# mapping, and sums the present pages by the crate whose compilation unit holds the code
# (.debug_aranges; needs a binary with debug info, e.g. `--release`) and by a few symbol families.
# Also prints the code size per crate. Needs root (pagemap), nm, readelf, kubectl.
# Usage: scripts/code-residency.sh [BINARY]   (default target/release/rkube; measure a copy)
set -euo pipefail
bin=$(realpath "${1:-target/release/rkube}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nm -S -C "$bin" | awk '$3 ~ /^[tTwW]$/' >"$work/text"
readelf --debug-dump=aranges "$bin" >"$work/aranges" 2>/dev/null
readelf --debug-dump=info --dwarf-depth=1 "$bin" 2>/dev/null | grep -E "Compilation Unit @|DW_AT_name" >"$work/cus"
"$bin" server --data-dir "$work/data" --secure-port 0 --disable-kubelet >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "serving on" "$work/log" && break; sleep 0.1; done
for _ in $(seq 300); do KUBECONFIG=$work/data/admin.kubeconfig kubectl get --raw /readyz >/dev/null 2>&1 && break; sleep 0.1; done
sleep 30
python3 - "$work" "$pid" "$bin" <<'PY'
import bisect, collections, re, struct, sys
work, pid, binary = sys.argv[1], sys.argv[2], sys.argv[3]
maps = [l.split() for l in open(f"/proc/{pid}/maps")]
mine = [m for m in maps if len(m) >= 6 and m[5] == binary]
base = min(int(m[0].split("-")[0], 16) for m in mine if int(m[2], 16) == 0)  # PIE: first PT_LOAD at 0
resident = set()
with open(f"/proc/{pid}/pagemap", "rb") as pm:
    for m in mine:
        if "x" not in m[1]:
            continue
        s, e = (int(x, 16) for x in m[0].split("-"))
        pm.seek(s // 4096 * 8)
        data = pm.read((e - s) // 4096 * 8)
        for i in range(0, len(data), 8):
            if struct.unpack("<Q", data[i:i + 8])[0] >> 63:  # bit 63: page present
                resident.add((s - base) // 4096 + i // 8)
names, cu = {}, None
for line in open(f"{work}/cus"):
    m = re.search(r"Compilation Unit @ offset (0x[0-9a-f]+|0):", line)
    if m:
        cu = int(m.group(1), 16)
        continue
    m = re.search(r"DW_AT_name\s+:.*\): (.*)$", line)
    if m and cu is not None and cu not in names:
        mm = re.search(r"@/([A-Za-z0-9_\-]+)\.", m.group(1))
        names[cu] = mm.group(1) if mm else m.group(1).strip().split("/")[0][:30]
ranges, cu = [], None
for line in open(f"{work}/aranges"):
    m = re.search(r"Offset into .debug_info:\s+(0x[0-9a-f]+|\d+)", line)
    if m:
        cu = int(m.group(1), 0)
        continue
    m = re.match(r"\s+([0-9a-f]{16}) ([0-9a-f]{16})", line)
    if m and cu is not None and int(m.group(2), 16):
        a = int(m.group(1), 16)
        ranges.append((a, a + int(m.group(2), 16), names.get(cu, "?")))
ranges.sort()
starts = [r[0] for r in ranges]
def crate_of(addr):
    i = bisect.bisect_right(starts, addr) - 1
    return ranges[i][2] if i >= 0 and ranges[i][0] <= addr < ranges[i][1] else "?"
size, res, fam_size, fam_res = (collections.Counter() for _ in range(4))
families = ["client::informer", "k8s_openapi", "serde::private::de::content", "kube_client", "schemars"]
for line in open(f"{work}/text"):
    addr, sz, _, name = line.rstrip("\n").split(" ", 3)
    a, s = int(addr, 16), int(sz, 16)
    if not s:
        continue
    pages = range(a // 4096, (a + s - 1) // 4096 + 1)
    r = s * sum(p in resident for p in pages) / len(pages)
    c = crate_of(a)
    size[c] += s
    res[c] += r
    for f in families:
        if f in name:
            fam_size[f] += s
            fam_res[f] += r
print(f"{binary}: resident code {len(resident) * 4096 / 2**20:.1f} MiB")
print("  resident MB / code MB  crate (compilation units)")
for c, v in res.most_common(20):
    print(f"  {v / 1e6:7.2f} / {size[c] / 1e6:6.2f}  {c}")
print("  resident MB / code MB  symbols containing")
for f in families:
    print(f"  {fam_res[f] / 1e6:7.2f} / {fam_size[f] / 1e6:6.2f}  {f}")
PY
kill "$pid"
wait "$pid" 2>/dev/null || true
