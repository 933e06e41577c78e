#!/usr/bin/env bash
# Requests per second through `capstan ingress` against nginx as a reverse proxy, to the same
# backend, measured with wrk in one run.
#
#   sudo crates/ingress/bench/compare.sh [path/to/capstan]   (default: target/release/capstan)
#
# Needs root (a network namespace), nginx (Debian: nginx-light), wrk, kubectl, curl, ip.
# Environment: THREADS (2), CONNECTIONS (64), DURATION (10s), ROUNDS (2).
#
# The backend is nginx answering a fixed 23-byte body, in a network namespace of its own on a
# veth pair (EndpointSlices may not name loopback addresses, so both proxies reach it on a
# private address that only this script's namespace has). Both proxies run on the host, on
# loopback ports, with two workers, access logs off, keep-alive to the backend, and the
# same X-Forwarded-* / X-Real-IP headers set. wrk runs each proxy in turn, ROUNDS times,
# after a warm-up; the figures are the mean requests/s of the rounds, and the CPU time each
# proxy spent per request (user + system, from /proc) — the steadier figure on a machine
# that other work shares.
set -euo pipefail

CAPSTAN=${1:-target/release/capstan}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-64}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}

for tool in nginx wrk kubectl curl ip; do
    command -v "$tool" >/dev/null || { echo "compare.sh: $tool is needed" >&2; exit 1; }
done
[ -x "$CAPSTAN" ] || { echo "compare.sh: no capstan binary at $CAPSTAN" >&2; exit 1; }
CAPSTAN=$(realpath "$CAPSTAN")

tag=$$
work=$(mktemp -d /tmp/capstan-ingress-bench.XXXXXX)
ns=cib$tag
vhost=cibh$tag
vpeer=cibp$tag
octet=$(( (tag % 200) + 20 ))
host_ip=10.251.$octet.1
backend_ip=10.251.$octet.2
pids=()

cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if ip netns list | grep -qw "$ns"; then
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
    fi
    ip link del "$vhost" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# --- the backend's namespace ---------------------------------------------------------------
ip netns add "$ns"
ip link add "$vhost" type veth peer name "$vpeer" netns "$ns"
ip addr add "$host_ip/30" dev "$vhost"
ip link set "$vhost" up
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" ip addr add "$backend_ip/30" dev "$vpeer"
ip netns exec "$ns" ip link set "$vpeer" up

mkdir -p "$work/backend/logs" "$work/proxy/logs"
cat >"$work/backend/nginx.conf" <<EOF
worker_processes 1;
pid $work/backend/nginx.pid;
error_log $work/backend/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    server {
        listen $backend_ip:8080 reuseport;
        location / { default_type text/plain; return 200 "hello from the backend\n"; }
    }
}
EOF
ip netns exec "$ns" nginx -p "$work/backend" -c "$work/backend/nginx.conf" -g 'daemon off;' &
pids+=($!)

# --- nginx as the reverse proxy ------------------------------------------------------------
nginx_port=$(free_port)
cat >"$work/proxy/nginx.conf" <<EOF
worker_processes 2;
pid $work/proxy/nginx.pid;
error_log $work/proxy/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    upstream backend {
        server $backend_ip:8080;
        keepalive 128;
    }
    server {
        listen 127.0.0.1:$nginx_port;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$http_host;
            proxy_set_header X-Forwarded-For \$remote_addr;
            proxy_set_header X-Real-IP \$remote_addr;
            proxy_set_header X-Forwarded-Proto \$scheme;
            proxy_set_header X-Forwarded-Host \$http_host;
            proxy_set_header X-Forwarded-Port \$server_port;
        }
    }
}
EOF
nginx -p "$work/proxy" -c "$work/proxy/nginx.conf" -g 'daemon off;' &
nginx_pid=$!
pids+=($nginx_pid)

# --- capstan: an API server and the ingress controller -------------------------------------
api_port=$(free_port)
CAPSTAN_LOG=warn "$CAPSTAN" server --data-dir "$work/data" --secure-port "$api_port" \
    --bind-address 127.0.0.1 --disable-scheduler --disable-controller-manager \
    >"$work/server.log" 2>&1 &
pids+=($!)
kubeconfig=$work/data/admin.kubeconfig
for _ in $(seq 300); do
    [ -f "$kubeconfig" ] && kubectl --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1 && break
    sleep 0.1
done
kubectl --kubeconfig "$kubeconfig" apply -f - >/dev/null <<EOF
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: capstan}
spec: {controller: capstan.dev/ingress}
---
apiVersion: v1
kind: Service
metadata: {name: backend, namespace: default}
spec: {ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: backend-1
  namespace: default
  labels: {kubernetes.io/service-name: backend}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: ["$backend_ip"], conditions: {ready: true}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: bench, namespace: default}
spec:
  ingressClassName: capstan
  rules:
  - http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: backend, port: {name: http}}}}]
EOF
ingress_port=$(free_port)
CAPSTAN_LOG=warn "$CAPSTAN" ingress --kubeconfig "$kubeconfig" --bind-address 127.0.0.1 \
    --http-port "$ingress_port" --https-port "$(free_port)" --metrics-port "$(free_port)" \
    --publish-address 127.0.0.1 >"$work/ingress.log" 2>&1 &
ingress_pid=$!
pids+=($ingress_pid)

wait_for() {
    for _ in $(seq 300); do
        [ "$(curl -s "http://127.0.0.1:$1/" || true)" = "hello from the backend" ] && return 0
        sleep 0.1
    done
    echo "compare.sh: nothing answers on port $1" >&2
    cat "$work/ingress.log" >&2
    exit 1
}
wait_for "$nginx_port"
wait_for "$ingress_port"

# CPU clock ticks (user + system) of these processes so far.
ticks() {
    local t=0 p
    for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
    echo "$t"
}

# Run wrk for $1 against port $2, counting the CPU of processes $3...: prints
# "requests/s microseconds-of-CPU-per-request".
rps() {
    local duration=$1 port=$2
    shift 2
    local before out after
    before=$(ticks "$@")
    out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$duration" "http://127.0.0.1:$port/")
    after=$(ticks "$@")
    if echo "$out" | grep -qE 'Non-2xx|Socket errors'; then
        echo "$out" | grep -E 'Non-2xx|Socket errors' >&2
    fi
    echo "$out" | awk -v cpu=$((after - before)) -v hz="$(getconf CLK_TCK)" \
        '/requests in/ {n = $1} /^Requests\/sec:/ {r = $2} END {printf "%s %.1f\n", r, cpu * 1e6 / hz / n}'
}

nginx_workers=$(pgrep -P "$nginx_pid" | tr '\n' ' ')
echo "warming up..."
rps 2s "$nginx_port" $nginx_workers >/dev/null
rps 2s "$ingress_port" "$ingress_pid" >/dev/null

nginx_sum=0 nginx_cpu=0 capstan_sum=0 capstan_cpu=0
for round in $(seq "$ROUNDS"); do
    read -r n ncpu < <(rps "$DURATION" "$nginx_port" $nginx_workers)
    read -r c ccpu < <(rps "$DURATION" "$ingress_port" "$ingress_pid")
    echo "round $round: nginx $n req/s ($ncpu us CPU/request), capstan ingress $c req/s ($ccpu us CPU/request)"
    nginx_sum=$(echo "$nginx_sum + $n" | bc -l)
    nginx_cpu=$(echo "$nginx_cpu + $ncpu" | bc -l)
    capstan_sum=$(echo "$capstan_sum + $c" | bc -l)
    capstan_cpu=$(echo "$capstan_cpu + $ccpu" | bc -l)
done
nginx_mean=$(echo "$nginx_sum / $ROUNDS" | bc -l)
capstan_mean=$(echo "$capstan_sum / $ROUNDS" | bc -l)
printf 'wrk -t%s -c%s -d%s, mean of %s rounds:\n' "$THREADS" "$CONNECTIONS" "$DURATION" "$ROUNDS"
printf '  nginx (reverse proxy)  %10.0f req/s  %5.1f us CPU/request\n' "$nginx_mean" \
    "$(echo "$nginx_cpu / $ROUNDS" | bc -l)"
printf '  capstan ingress        %10.0f req/s  %5.1f us CPU/request  (%.0f%% of nginx'"'"'s req/s)\n' \
    "$capstan_mean" "$(echo "$capstan_cpu / $ROUNDS" | bc -l)" \
    "$(echo "100 * $capstan_mean / $nginx_mean" | bc -l)"
