# Shared by test/gpu/run_device.sh and test/gpu/run_mesh_device.sh (sourced): logging of steps.
# Expects SUMMARY (the summary file) and FAILED (0) to be set by the script that sources it.

note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME LOG REQUIRED COMMAND...: runs, appends to LOG, notes the status and time; a required
# step that fails sets FAILED=1.
step() {
    local name=$1 log=$2 required=$3
    shift 3
    local start
    start=$(date +%s)
    echo "==== $name: $*" >>"$log"
    "$@" >>"$log" 2>&1
    local rc=$?
    note "$name: $([[ $rc == 0 ]] && echo ok || echo "FAILED (rc $rc)") in $(($(date +%s) - start)) s"
    if [[ $rc != 0 && $required == required ]]; then FAILED=1; fi
    return $rc
}

# The Debian packages the engine builds against (libnuma, cJSON, utf8proc, oneDNN, libjpeg-turbo,
# libspng, zlib), which the GPU machines' image may lack and cannot install: `--fetch-deps` on a
# machine with apt downloads them into build-gpu/device-deps; the device run is given that folder
# (carry) and unpacks every package into BUILD/deps, ahead of the image's own.
UFORM_DEVICE_DEB_PACKAGES=(libnuma-dev libnuma1 libcjson-dev libcjson1 libutf8proc-dev libutf8proc2 libdnnl-dev
    libdnnl2 ocl-icd-libopencl1 libjpeg62-turbo-dev libjpeg62-turbo libspng-dev libspng0 zlib1g-dev)

# unpack_deps DEPS BUILD: appends -DCMAKE_PREFIX_PATH to CONFIGURE and exports LD_LIBRARY_PATH.
unpack_deps() {
    local deps=$1 build=$2
    if compgen -G "$deps/*.deb" >/dev/null; then
        if [[ ! -d $build/deps/usr ]]; then
            mkdir -p "$build/deps" # dpkg -x makes only the last folder of the path
            for package in "$deps"/*.deb; do dpkg -x "$package" "$build/deps"; done
        fi
        CONFIGURE+=(-DCMAKE_PREFIX_PATH="$build/deps/usr")
        export LD_LIBRARY_PATH="$build/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export CPATH="$build/deps/usr/include:$build/deps/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
        export PKG_CONFIG_PATH="$build/deps/usr/lib/x86_64-linux-gnu/pkgconfig:$build/deps/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
        export LIBRARY_PATH="$build/deps/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
        note "dependencies: unpacked from the carried Debian packages in $deps"
    else
        note "dependencies: none carried (bash test/gpu/run_device.sh --fetch-deps here, carry build-gpu/device-deps)"
    fi
}
