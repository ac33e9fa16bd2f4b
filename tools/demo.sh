#!/usr/bin/env bash
# demo.sh - `make demo`: the whole pipeline a new user sees first. Starts
# kpi-infer on the built-in model and kpi-agent (root) on it, drives ~30 s of
# mixed load with kpi-bench, prints a kpitop frame, the trace's path and the
# commands to explore it. Everything it starts is stopped on every exit path.
set -u
cd "$(dirname "$0")/.."

B=build
DEMO_DIR=${DEMO_DIR:-$B/demo}
DB=$DEMO_DIR/trace.db
DURATION=${DEMO_SECONDS:-30}
pids=()

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

# Stop in reverse order of start: load, then the agent (SIGINT flushes the
# trace), then the daemon (SIGTERM drains it).
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		local p=${pids[$i]}
		if kill -0 "$p" 2>/dev/null; then
			kill -INT "$p" 2>/dev/null
			for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
			kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null
			for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
			kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
			wait "$p" 2>/dev/null
		fi
	done
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

command -v sqlite3 >/dev/null || die "sqlite3 (the CLI) is missing: run make deps, or apt-get install sqlite3"
for p in kpi-infer kpi-agent kpi-bench kpitop kpi-report libkpi_sqlite.so; do
	[ -e "$B/$p" ] || die "$B/$p is not built: run make and read its errors"
done

root=1
if [ "$(id -u)" != 0 ]; then
	root=0
	cat >&2 <<-MSG

	  kpi-agent needs root (it loads BPF programs): this run shows kpi-infer and
	  kpi-bench only, and records no trace. For the whole pipeline run:

	      sudo make demo

	MSG
fi

mkdir -p "$DEMO_DIR"
rm -f "$DB" "$DB-wal" "$DB-shm"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port

say "starting kpi-infer on the built-in model (port $port; the first run generates the model)"
"$B/kpi-infer" --port "$port" >"$DEMO_DIR/kpi-infer.log" 2>&1 &
infer=$!
pids+=("$infer")
for _ in $(seq 600); do
	grep -q 'listening on http://' "$DEMO_DIR/kpi-infer.log" && break
	kill -0 "$infer" 2>/dev/null || die "kpi-infer exited: $(tail -5 "$DEMO_DIR/kpi-infer.log")"
	sleep 0.1
done
grep -q 'listening on http://' "$DEMO_DIR/kpi-infer.log" || die "kpi-infer not ready after 60 s: see $DEMO_DIR/kpi-infer.log"

if [ "$root" = 1 ]; then
	say "starting kpi-agent on pid $infer, writing $DB"
	"$B/kpi-agent" --db "$DB" --pid "$infer" >"$DEMO_DIR/kpi-agent.log" 2>&1 &
	pids+=("$!")
	for _ in $(seq 300); do
		grep -q "attached to pid $infer" "$DEMO_DIR/kpi-agent.log" && break
		kill -0 "${pids[-1]}" 2>/dev/null || die "kpi-agent exited: $(tail -5 "$DEMO_DIR/kpi-agent.log")"
		sleep 0.1
	done
	grep -q "attached to pid $infer" "$DEMO_DIR/kpi-agent.log" || die "kpi-agent did not attach in 30 s: see $DEMO_DIR/kpi-agent.log"
fi

say "driving ${DURATION} s of mixed load: Poisson arrivals, mixed lengths, and a burst half-way"
"$B/kpi-bench" --url "$url" --duration "$DURATION" --rate 3 --prompt-len uniform:16:256 \
	--max-tokens uniform:8:64 --seed 1 --quiet >"$DEMO_DIR/bench-poisson.txt" 2>&1 &
steady=$!
pids+=("$steady")
sleep $((DURATION / 2))
"$B/kpi-bench" --url "$url" --burst --requests 40 --prompt-len uniform:64:512 --max-tokens 32 \
	--seed 2 --quiet >"$DEMO_DIR/bench-burst.txt" 2>&1 &
pids+=("$!")
wait "$steady" "${pids[-1]}" 2>/dev/null
say "what the clients saw (kpi-bench): the steady load, then the burst"
cat "$DEMO_DIR/bench-poisson.txt"
echo
cat "$DEMO_DIR/bench-burst.txt"

if [ "$root" = 0 ]; then
	echo
	echo "No trace was recorded: kpi-agent needs root. Run: sudo make demo"
	exit 1
fi

sleep 1.5   # one more flush of the agent
kill -INT "${pids[1]}" 2>/dev/null
wait "${pids[1]}" 2>/dev/null
# A trace without a request is a failed demo, however well the load went
# (an agent that saw other pids than the daemon's, in a pid namespace of its own).
n_req=$(sqlite3 "$DB" 'SELECT count(*) FROM requests' 2>&1)
if ! [ "$n_req" -gt 0 ] 2>/dev/null; then
	printf '\033[1;31mdemo FAILED: the trace %s holds no request (%s) though kpi-bench drove the daemon.\033[0m\n' "$DB" "$n_req" >&2
	echo "kpi-agent's log ($DEMO_DIR/kpi-agent.log) ends:" >&2
	tail -5 "$DEMO_DIR/kpi-agent.log" >&2
	exit 1
fi
say "the trace holds $n_req requests"
echo
say "kpitop --once over the last minute of the trace"
"$B/kpitop" --db "$DB" --once --window 1m --rows 12
echo
say "the trace: $DB"
cat <<-EOF2
	Explore it:
	  $B/kpitop --db $DB --window 1m          # browse it (←/→ move through time, h for help)
	  $B/kpi-report --db $DB                  # what got slow and why (--format html -o report.html)
	  sqlite3 $DB "SELECT count(*), avg(ttft_ns)/1e6 AS ttft_ms FROM requests"
	  sqlite3 $DB -cmd '.load $B/libkpi_sqlite' \\
	      "SELECT percentile(ttft_ns, 99)/1e6 AS ttft_p99_ms, percentile(e2e_ns, 50)/1e6 AS e2e_p50_ms FROM requests"
	Watch live (two terminals):
	  sudo $B/kpi-agent --db $DB              # traces every running kpi-infer
	  $B/kpitop --db $DB
EOF2
