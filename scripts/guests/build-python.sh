#!/usr/bin/env bash
# Builds hybox's CPython guest for wasm32-wasi from Debian's source packages
# with Debian's own toolchain (clang, lld, wasi-libc, libclang-rt-14-dev-wasm32),
# and installs it into DEST (default build/guests):
#
#   python-hybox.wasm   CPython 3.11 as a WASI reactor (exports hybox_init,
#                       hybox_run, hybox_slots; see python/reactor.c), -O2,
#                       stripped; zlib and sqlite3 built in
#   python311.zip       the pure-Python stdlib: sources and unchecked-hash
#                       .pyc files, stored (imports read it uncompressed)
#   python-hybox.json   what was built from what, and the sha256 of both files
#                       (the server checks them at load)
#
#   build-python.sh [DEST]
#
# Inputs are pinned: the Debian source packages below by version and the
# sha256 of every file apt-get source downloads. The result is cached under
# $HYBOX_GUEST_CACHE (default /var/cache/hybox/guests, or ~/.cache/hybox/guests
# when not root) in a directory named
# by the hash of all inputs (pins, this script, reactor.c, toolchain package
# versions); a cache hit only copies. HYBOX_GUEST_REBUILD=1 rebuilds;
# HYBOX_KEEP_WORK=1 keeps the build directory.
# Needs root for apt (a deb-src line for bookworm is added when missing).
set -euo pipefail

dest=${1:-build/guests}
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${HYBOX_GUEST_CACHE:-}" ]; then
	cache_root=$HYBOX_GUEST_CACHE
elif [ "$(id -u)" = 0 ]; then
	cache_root=/var/cache/hybox/guests
else
	cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/hybox/guests
fi
jobs=${HYBOX_BUILD_JOBS:-$(nproc)}
log() { echo "build-python: $*" >&2; }

# Pinned Debian source packages (bookworm) and the sha256 of their files.
py_pkg=python3.11 py_ver=3.11.2-6+deb12u8
zlib_pkg=zlib zlib_ver=1:1.2.13.dfsg-1
sqlite_pkg=sqlite3 sqlite_ver=3.40.1-2+deb12u2
sums="
197fa19ab45f41c820f40f6d9ead671c2ea29ddc53ba9424b36f1bf58458a10e  python3.11_3.11.2-6+deb12u8.dsc
2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849  python3.11_3.11.2.orig.tar.gz
ece2d63c70ac0b7a401fbe6b51b0103be997c294a01a3865549be1862794ba97  python3.11_3.11.2-6+deb12u8.debian.tar.xz
3fa1e6b2fc525062aa88207dda52fed8e045373c809d362fe8a2bfbf7cf515a8  zlib_1.2.13.dfsg-1.dsc
71feb7947e3c00ef125f83b79a4e529bde31171e5babe48b391f06758d1ab0a1  zlib_1.2.13.dfsg.orig.tar.bz2
f66cf3d4f2d7defcd4d1fd1fb0a11ee39f1e01b42ec7d059c9dc5c1695133c44  zlib_1.2.13.dfsg-1.debian.tar.xz
ee3459ae9d00939741c7708fc1b8ce1bde12d8c3fb1dfa005bbbc8651d884e23  sqlite3_3.40.1-2+deb12u2.dsc
aaa776260ab4dc976db34aa7891819484c8676b5b2783123ebc6301e2ca5d655  sqlite3_3.40.1.orig.tar.xz
a5e95a18d1b59729278860559ded78751b9163ffb5bb906c5cd24c015f71d5fd  sqlite3_3.40.1.orig-www.tar.xz
0843bc12e4364076477935ce313a6d0796fd899a989ff18ebb6545540e10e4ca  sqlite3_3.40.1-2+deb12u2.debian.tar.xz
"
tools=(clang lld wasi-libc libclang-rt-14-dev-wasm32 llvm-14 python3.11 tcl gcc make dpkg-dev)
outputs=(python-hybox.wasm python311.zip python-hybox.json)

# --- toolchain ---------------------------------------------------------------
missing=()
for p in "${tools[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || { log "missing ${missing[*]}; run as root or install them"; exit 1; }
	log "apt-get install ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
toolchain=$(dpkg-query -W -f='${Package}=${Version}\n' "${tools[@]}" clang-14 lld-14)

# --- cache -------------------------------------------------------------------
key=$( {
	echo "$py_pkg=$py_ver $zlib_pkg=$zlib_ver $sqlite_pkg=$sqlite_ver"
	echo "$sums"
	echo "$toolchain"
	cat "$0" "$here/python/reactor.c" "$here/python/sqlite-wasi.h"
} | sha256sum | cut -c1-32)
out=$cache_root/$key
# One build per input hash at a time (several checkouts may share the cache).
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock-$key"
flock 9
install_outputs() {
	mkdir -p "$dest"
	for f in "${outputs[@]}"; do
		cp "$out/$f" "$dest/$f.tmp" && mv "$dest/$f.tmp" "$dest/$f"
	done
}
if [ -z "${HYBOX_GUEST_REBUILD:-}" ] && [ -f "$out/python-hybox.json" ] &&
	(cd "$out" && sha256sum -c --quiet SHA256SUMS 2>/dev/null); then
	install_outputs
	log "$dest/python-hybox.wasm from cache $out"
	exit 0
fi

start=$(date +%s)
# A fixed build path: it ends up in the build (sysconfig's CONFIG_ARGS).
work=$cache_root/work-$key
rm -rf "$work"
mkdir -p "$work"
[ -n "${HYBOX_KEEP_WORK:-}" ] || trap 'rm -rf "$work"' EXIT
log "building in $work (inputs $key, $jobs jobs)"

# --- sources -----------------------------------------------------------------
src=$cache_root/src
mkdir -p "$src"
have_sources() { (cd "$src" && echo "$sums" | grep . | sha256sum -c --quiet - >/dev/null 2>&1); }
if ! have_sources; then
	if ! apt-get source --print-uris "$py_pkg=$py_ver" >/dev/null 2>&1; then
		[ "$(id -u)" = 0 ] || { log "no deb-src for bookworm; run as root"; exit 1; }
		log "adding deb-src for bookworm (/etc/apt/sources.list.d/hybox-src.sources)"
		cat >/etc/apt/sources.list.d/hybox-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
		apt-get update -qq
	fi
	(cd "$src" && apt-get source -qq --download-only "$py_pkg=$py_ver" "$zlib_pkg=$zlib_ver" "$sqlite_pkg=$sqlite_ver" 2>&1 |
		grep -v "unsandboxed" >&2 || true)
	if ! have_sources; then
		(cd "$src" && echo "$sums" | grep . | sha256sum -c - >&2) || true
		log "the downloaded source packages do not match the pinned sha256"
		exit 1
	fi
fi
for p in "$py_pkg"_"${py_ver#*:}" "$zlib_pkg"_"${zlib_ver#*:}" "$sqlite_pkg"_"${sqlite_ver#*:}"; do
	dpkg-source --no-check -x "$src/$p.dsc" "$work/${p%%_*}" >/dev/null
done

export SOURCE_DATE_EPOCH=1704067200
# A private sysroot: Debian's clang also searches /usr/include and
# /usr/local/include for wasm32-wasi, where the host's headers would leak in.
sysroot=$work/sysroot
mkdir -p "$sysroot/include" "$sysroot/lib/pkgconfig"
ln -s /usr/include/wasm32-wasi "$sysroot/include/wasm32-wasi"
ln -s /usr/lib/wasm32-wasi "$sysroot/lib/wasm32-wasi"
# Debian's clang runs binaryen's wasm-opt on every optimised link when it
# finds one beside itself or on PATH, so the output would depend on whether
# the machine has binaryen: with binaryen 108 installed, wasm-opt failed on
# configure's test programs, and CPython came out without _sqlite3. A
# wasm-opt that does nothing comes first (-B: searched before anything).
mkdir -p "$work/nobinaryen"
printf '#!/bin/sh\nexit 0\n' >"$work/nobinaryen/wasm-opt"
chmod +x "$work/nobinaryen/wasm-opt"
WCC="clang --target=wasm32-wasi --sysroot=$sysroot -B$work/nobinaryen"
WCFLAGS="-O2 -g0 -ffile-prefix-map=$work=."

# --- zlib --------------------------------------------------------------------
(
	cd "$work/zlib"
	objs=()
	for c in adler32 compress crc32 deflate gzclose gzlib gzread gzwrite infback inffast inflate inftrees trees uncompr zutil; do
		$WCC $WCFLAGS -D_LARGEFILE64_SOURCE=1 -DHAVE_HIDDEN -c "$c.c" -o "$c.o"
		objs+=("$c.o")
	done
	llvm-ar-14 rcsD "$sysroot/lib/libz.a" "${objs[@]}"
	cp zlib.h zconf.h "$sysroot/include/"
)
log "zlib done ($(($(date +%s) - start)) s)"

# --- sqlite3 -----------------------------------------------------------------
(
	cd "$work/sqlite3"
	mkdir -p bld && cd bld
	../configure --disable-tcl --quiet >/dev/null
	make -s sqlite3.c >/dev/null 2>&1
	# WASI has no mmap, file modes or locks, dlopen or threads
	# (python/sqlite-wasi.h supplies the missing calls).
	$WCC $WCFLAGS -include "$here/python/sqlite-wasi.h" -D_WASI_EMULATED_GETPID \
		-DSQLITE_THREADSAFE=0 -DSQLITE_OMIT_LOAD_EXTENSION -DSQLITE_OMIT_WAL \
		-DSQLITE_MAX_MMAP_SIZE=0 -DSQLITE_NOHAVE_SYSTEM \
		-DSQLITE_ENABLE_FTS5 -DSQLITE_ENABLE_MATH_FUNCTIONS \
		-c sqlite3.c -o sqlite3.o
	llvm-ar-14 rcsD "$sysroot/lib/libsqlite3.a" sqlite3.o
	cp sqlite3.h sqlite3ext.h "$sysroot/include/"
)
log "sqlite3 done ($(($(date +%s) - start)) s)"

# --- CPython -----------------------------------------------------------------
py=$work/python3.11
(
	cd "$py"
	# The reduced-stdlib hack of Tools/wasm: no shared modules at all.
	: >Modules/Setup.local
	# sys.version carries the build's date: make it that of the inputs.
	sed -i '1i #define DATE "Jan  1 2024"\n#define TIME "00:00:00"' Modules/getbuildinfo.c
	# Only what is built here: no pkg-config look-ups of the host's
	# libraries, and modules without a wasm build of their library off.
	PKG_CONFIG_PATH= PKG_CONFIG_LIBDIR="$sysroot/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$sysroot" \
		py_cv_module__lzma=n/a py_cv_module__bz2=n/a py_cv_module__uuid=n/a py_cv_module__crypt=n/a \
		py_cv_module__ctypes=n/a py_cv_module__ssl=n/a py_cv_module__hashlib=n/a py_cv_module__gdbm=n/a \
		py_cv_module__dbm=n/a py_cv_module_readline=n/a py_cv_module__curses=n/a \
		py_cv_module__curses_panel=n/a py_cv_module__tkinter=n/a py_cv_module_nis=n/a \
		py_cv_module__ctypes_test=n/a py_cv_module_xxlimited=n/a py_cv_module_xxlimited_35=n/a \
	CONFIG_SITE=Tools/wasm/config.site-wasm32-wasi \
		CC="$WCC" CPP="clang-cpp-14 --target=wasm32-wasi --sysroot=$sysroot" AR=llvm-ar-14 RANLIB=llvm-ranlib-14 \
		CFLAGS="$WCFLAGS" LDFLAGS="-L$sysroot/lib" CPPFLAGS="-I$sysroot/include" \
		ZLIB_CFLAGS="-I$sysroot/include" ZLIB_LIBS="-L$sysroot/lib -lz" \
		LIBSQLITE3_CFLAGS="-I$sysroot/include" LIBSQLITE3_LIBS="-L$sysroot/lib -lsqlite3" \
		./configure --host=wasm32-unknown-wasi --build="$(./config.guess)" \
		--with-build-python=/usr/bin/python3.11 --disable-test-modules \
		--without-ensurepip --disable-ipv6 --quiet >"$work/configure.log" 2>&1 ||
		{ tail -30 "$work/configure.log" >&2; exit 1; }
	make -s -j"$jobs" >"$work/make.log" 2>&1 || { tail -40 "$work/make.log" >&2; exit 1; }
	# configure leaves out a module whose library it cannot link, quietly:
	# the ones the guest promises must be built in.
	for m in zlib _sqlite3; do
		grep -q "\"$m\"" Modules/config.c || {
			log "CPython was built without its module $m: configure could not use the wasm build of its library"
			grep -i -A3 "checking for.*${m#_}" "$work/configure.log" >&2 || true
			exit 1
		}
	done
)
log "cpython done ($(($(date +%s) - start)) s)"

# The reactor: libpython and the built-in modules, linked with reactor.c
# instead of Programs/python.o.
(
	cd "$py"
	$WCC $WCFLAGS -IInclude -IInclude/internal -I. -c "$here/python/reactor.c" -o hybox_reactor.o
	link=$(make -s -f Makefile -f - hybox-print-link <<'MK'
hybox-print-link:
	@echo $(PY_CORE_LDFLAGS) $(LINKFORSHARED) $(BLDLIBRARY) $(LIBS) $(MODLIBS) $(SYSLIBS)
MK
)
	# shellcheck disable=SC2086
	$WCC -mexec-model=reactor -Wl,--strip-all -Wl,-z,stack-size=1048576 \
		-Wl,--export=__stack_pointer -Wl,--export=malloc -Wl,--export=free \
		hybox_reactor.o $link -o "$work/python-hybox.wasm"
)
log "reactor linked ($(($(date +%s) - start)) s)"

# --- stdlib ------------------------------------------------------------------
(
	lib=$work/stdlib
	mkdir -p "$lib"
	cd "$py/Lib"
	# What a sandbox has no use for: tests, GUI, the package installer,
	# build tools, and modules whose C parts WASI lacks.
	tar -cf - --exclude=__pycache__ --exclude='test' --exclude='tests' --exclude='idle_test' \
		--exclude=idlelib --exclude=tkinter --exclude=turtledemo --exclude=ensurepip \
		--exclude=lib2to3 --exclude=venv --exclude='distutils/command/*.exe' \
		--exclude=site-packages . | tar -xf - -C "$lib"
	cp "$py"/build/lib.wasi-wasm32-3.11/_sysconfigdata*.py "$lib/"
	cd "$lib"
	find . -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	/usr/bin/python3.11 -m compileall -q -b -j"$jobs" --invalidation-mode unchecked-hash . >/dev/null || true
	find . -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	/usr/bin/python3.11 - "$work/python311.zip" <<'PY'
import os, sys, zipfile
names = sorted(os.path.relpath(os.path.join(d, f)) for d, _, fs in os.walk(".") for f in fs)
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_STORED) as z:
    for n in names:
        info = zipfile.ZipInfo(n, (2024, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        with open(n, "rb") as f:
            z.writestr(info, f.read())
PY
)
log "stdlib zipped ($(($(date +%s) - start)) s)"

# --- manifest ----------------------------------------------------------------
wasm_sum=$(sha256sum "$work/python-hybox.wasm" | cut -d' ' -f1)
zip_sum=$(sha256sum "$work/python311.zip" | cut -d' ' -f1)
cat >"$work/python-hybox.json" <<JSON
{
  "python": "$py_pkg $py_ver",
  "zlib": "$zlib_pkg $zlib_ver",
  "sqlite3": "$sqlite_pkg $sqlite_ver",
  "inputs": "$key",
  "wasm": {"name": "python-hybox.wasm", "sha256": "$wasm_sum"},
  "stdlib": {"name": "python311.zip", "sha256": "$zip_sum"}
}
JSON
mkdir -p "$out.tmp"
for f in "${outputs[@]}"; do cp "$work/$f" "$out.tmp/$f"; done
(cd "$out.tmp" && sha256sum "${outputs[@]}" >SHA256SUMS)
rm -rf "$out" && mv "$out.tmp" "$out"
install_outputs
log "$dest/python-hybox.wasm built in $(($(date +%s) - start)) s ($(du -h "$out/python-hybox.wasm" | cut -f1), stdlib $(du -h "$out/python311.zip" | cut -f1))"
