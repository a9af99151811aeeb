#!/bin/bash
# rkube migrate round trip (docs/benchmarks.md): 10,000 ConfigMaps created on SQLite, moved to a
# local etcd and back, timed, and their UIDs compared. Needs etcd and kubectl on PATH.
# Usage: scripts/migrate-roundtrip.sh [path to rkube, default target/release/rkube]
set -euo pipefail
B=${1:-target/release/rkube}
D=$(mktemp -d /tmp/rkube-migrate.XXXX)
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
$B server --data-dir $D --secure-port 0 --disable-kubelet --disable-dns --disable-proxy --disable-scheduler --controllers=serviceaccount-controller > $D/log 2>&1 &
P=$!
for i in $(seq 100); do grep -q "serving on" $D/log && break; sleep 0.5; done
export KUBECONFIG=$D/admin.kubeconfig
kubectl create namespace moved >/dev/null
for chunk in $(seq 0 9); do
  python3 -c "
import json,sys
c=int(sys.argv[1])
items=[{'apiVersion':'v1','kind':'ConfigMap','metadata':{'name':'cm-%05d'%i,'namespace':'moved'},'data':{'i':str(i),'pad':'x'*200}} for i in range(c*1000,(c+1)*1000)]
print(json.dumps({'apiVersion':'v1','kind':'List','items':items}))" $chunk | kubectl create -f - >/dev/null
done
kubectl get cm -n moved -o json | python3 -c "import json,sys; print(sorted((o['metadata']['name'],o['metadata']['uid']) for o in json.load(sys.stdin)['items']).__len__())"
kubectl get cm -n moved -o json | python3 -c "import json,sys; [print(o['metadata']['name'],o['metadata']['uid']) for o in json.load(sys.stdin)['items']]" | sort > $D/uids.before
kill -TERM $P; wait $P || true
PORTS=$(python3 -c "
import socket
s=[socket.socket() for _ in range(2)]
[x.bind(('127.0.0.1',0)) for x in s]
print(' '.join(str(x.getsockname()[1]) for x in s))")
set -- $PORTS
etcd --data-dir $D/etcd --listen-client-urls http://127.0.0.1:$1 --advertise-client-urls http://127.0.0.1:$1 --listen-peer-urls http://127.0.0.1:$2 --initial-advertise-peer-urls http://127.0.0.1:$2 --initial-cluster default=http://127.0.0.1:$2 > $D/etcd.log 2>&1 &
E=$!
for i in $(seq 50); do etcdctl --endpoints http://127.0.0.1:$1 endpoint health >/dev/null 2>&1 && break; sleep 0.2; done
echo "to etcd:"; /usr/bin/time -f "%e s %M KB" $B migrate --from sqlite:$D --to etcd:http://127.0.0.1:$1
mv $D/state.db $D/state.db.before; rm -f $D/state.db-wal $D/state.db-shm
echo "back to sqlite:"; /usr/bin/time -f "%e s %M KB" $B migrate --from etcd:http://127.0.0.1:$1 --to sqlite:$D
kill $E
$B server --data-dir $D --secure-port 0 --disable-kubelet --disable-dns --disable-proxy --disable-scheduler --controllers=serviceaccount-controller > $D/log2 2>&1 &
P=$!
for i in $(seq 100); do grep -q "serving on" $D/log2 && break; sleep 0.5; done
kubectl get cm -n moved -o json | python3 -c "import json,sys; [print(o['metadata']['name'],o['metadata']['uid']) for o in json.load(sys.stdin)['items']]" | sort > $D/uids.after
kill -TERM $P; wait $P || true
cmp $D/uids.before $D/uids.after && echo "UIDs equal: $(wc -l < $D/uids.after)"
