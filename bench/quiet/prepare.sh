#!/bin/bash
# prepare.sh builds what a quiet many-core machine needs to run round
# five's measurements without a Go toolchain or a Redis of its own: static
# binaries of bench, its tests and internal/lua's tests, and this machine's
# redis-server with its libraries (run through their own loader, so that
# nothing else on that machine loads them), packed into .device/payload.tgz
# beside run.sh. Run it from the repository's root; carry .device, and run
# `bash .device/run.sh` there with $OUT set (docs/performance.md, round five).
set -euo pipefail
root=$(pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/redis/lib" .device
bin=$(command -v redis-server)
cp "$bin" "$stage/redis/redis-server.bin"
for lib in $(ldd "$bin" | awk '/=>/ {print $3}'); do cp -L "$lib" "$stage/redis/lib/"; done
cp -L "$(ldd "$bin" | awk '/ld-linux/ {print $1}')" "$stage/redis/lib/"
cat > "$stage/redis/redis-server" <<'WRAP'
#!/bin/sh
d=$(dirname "$(readlink -f "$0")")
exec "$d/lib/$(basename "$(ls "$d"/lib/ld-linux*)")" --library-path "$d/lib" "$d/redis-server.bin" "$@"
WRAP
chmod +x "$stage/redis/redis-server"
(cd bench && CGO_ENABLED=0 go build -ldflags='-s -w' -o "$stage/bench" . &&
	CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$stage/bench.test" .)
CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$stage/lua.test" ./internal/lua
tar czf .device/payload.tgz -C "$stage" .
cp bench/quiet/run.sh .device/run.sh
du -sh .device
