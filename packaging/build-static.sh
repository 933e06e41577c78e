#!/usr/bin/env bash
# Build capstan as one static binary (musl libc, no shared libraries), runnable on any Linux
# of the same CPU architecture whatever its libc.
#
#   packaging/build-static.sh                 # release build, stripped
#   PROFILE=dev packaging/build-static.sh     # a quicker unoptimised build (checks the toolchain)
#   OUT=/usr/local/bin/capstan packaging/build-static.sh
#
# Needs the Rust target ARCH-unknown-linux-musl (added with rustup when missing) and a musl C
# compiler for the C parts of the dependencies (ring, mimalloc): Debian's musl-tools gives
# musl-gcc.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=$(uname -m)
case "$arch" in
  x86_64 | aarch64) ;;
  *)
    echo "build-static.sh: no musl build for $arch (x86_64 and aarch64 are supported)" >&2
    exit 1
    ;;
esac
target="$arch-unknown-linux-musl"
profile="${PROFILE:-release}"
case "$profile" in
  release) dir=release ;;
  dev) dir=debug ;;
  *) dir="$profile" ;;
esac

if ! rustup target list --installed | grep -qx "$target"; then
  rustup target add "$target"
fi
if ! command -v musl-gcc >/dev/null; then
  echo "build-static.sh: musl-gcc not found; install it (Debian/Ubuntu: apt-get install musl-tools)" >&2
  exit 1
fi

# The C compiler for the target's C code; Rust links with its own self-contained musl objects.
target_env=$(echo "$target" | tr '-' '_')
export "CC_${target_env}=musl-gcc"
# Release builds are stripped (symbols and debug information): about a third of the size.
export CARGO_PROFILE_RELEASE_STRIP="${CARGO_PROFILE_RELEASE_STRIP:-symbols}"

cargo build --locked -p capstan --bin capstan --target "$target" --profile "$profile"

target_dir="${CARGO_TARGET_DIR:-target}"
bin="$target_dir/$target/$dir/capstan"
# A static binary asks for no program interpreter (ld.so) and no shared library.
if readelf -l "$bin" | grep -q 'Requesting program interpreter' ||
  readelf -d "$bin" | grep -q '(NEEDED)'; then
  echo "build-static.sh: $bin is not static:" >&2
  readelf -d "$bin" | grep '(NEEDED)' >&2 || true
  exit 1
fi
"$bin" --version >/dev/null

if [ -n "${OUT:-}" ]; then
  install -D -m 0755 "$bin" "$OUT"
  bin="$OUT"
fi
echo "$bin: $(du -h "$bin" | cut -f1) static ($("$bin" --version))"
