#!/usr/bin/env bash
# The fresh-machine sequence: clone this repository's HEAD into a temporary folder, make a new
# virtual environment, and run the README's two commands verbatim, in order, on ONE empty
# ODEINFER_CACHE_DIR and an empty PyTensor compile directory (the demo, then the test suite), while
# another odeinfer process shares the cache. Prints the wall time of each command; exits non-zero
# when either fails.
#
#   bash benchmarks/fresh_clone.sh            # new venv: pip downloads every dependency
#   bash benchmarks/fresh_clone.sh --reuse    # reuse the current Python (no venv; faster)
#
# Needs network access to the package index for the venv. Leaves the folder for inspection and
# prints its path.
set -euo pipefail

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=$(mktemp -d "${TMPDIR:-/tmp}/odeinfer-fresh.XXXXXX")
git clone -q "$repo" "$work/odeinfer"
export ODEINFER_CACHE_DIR="$work/cache"
mkdir -p "$ODEINFER_CACHE_DIR"
# a brand-new machine has no PyTensor compile cache either
export PYTENSOR_FLAGS="base_compiledir=$work/pytensor${PYTENSOR_FLAGS:+,$PYTENSOR_FLAGS}"
cd "$work/odeinfer"
echo "clone: $work/odeinfer at $(git rev-parse --short HEAD); cache: $ODEINFER_CACHE_DIR (empty)"

if [[ "${1:-}" != "--reuse" ]]; then
    python -m venv "$work/venv"
    # shellcheck disable=SC1091
    source "$work/venv/bin/activate"
    python -m pip install -q --upgrade pip
fi

# the README's two commands, verbatim: the first line of each ```bash block
mapfile -t commands < <(awk '/^```bash/{getline; print}' README.md)
if [[ ${#commands[@]} -lt 2 ]]; then
    echo "README.md: expected two \`\`\`bash blocks (demo, tests), found ${#commands[@]}" >&2
    exit 2
fi

# another process sharing the cache while the suite runs: solves and fits a zoo model in a loop
concurrent() {
    while true; do
        python - <<'EOF' >/dev/null 2>&1 || true
import odeinfer as oi
z = oi.zoo.get("lotka_volterra")
data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=3)
oi.Embedding().fit(z.model, data, start=z.params)
EOF
        sleep 5
    done
}

status=0
for i in 0 1; do
    cmd=${commands[$i]}
    if [[ $i == 1 ]]; then
        concurrent &
        other=$!
    fi
    echo "== $cmd"
    start=$(date +%s)
    bash -c "$cmd" || status=$?
    echo "== took $(( $(date +%s) - start )) s, exit status $status"
    if [[ $i == 1 ]]; then
        kill "$other" 2>/dev/null || true
        wait "$other" 2>/dev/null || true
    fi
    if [[ $status != 0 ]]; then
        break
    fi
done
echo "folder: $work"
exit $status
