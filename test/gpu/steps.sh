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
