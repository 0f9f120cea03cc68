/**
 *  @file   nccl.c
 *  @brief  Loads `libnccl.so.2` at run time (see nccl_loader.h), after keeping NVLink multicast off.
 */
#include "nccl_loader.h"

#include <stdio.h>  // `vsnprintf`
#include <stdlib.h> // `getenv`, `setenv`
#include <string.h> // `strcmp`

static char const *nccl_result_name(uform_nccl_result_t result) {
    static char const *const names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                        "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                        "ncclRemoteError",   "ncclInProgress"};
    return (unsigned)result < sizeof names / sizeof names[0] ? names[result] : "ncclResult?";
}

#if UFORM_WITH_CUDA

#include <dlfcn.h>   // `dlopen`
#include <pthread.h> // `pthread_once`

static struct {
    pthread_once_t once;
    bool ready;
    uform_nccl_t table;
    char reason[512];
} uform_nccl_state = {.once = PTHREAD_ONCE_INIT};

static void nccl_load(void) {
    // Keep NVLink SHARP (multicast objects) off unless the user opted in; NCCL reads this once,
    // at its first initialisation, so it is set before the library is even opened.
    char const *allow = getenv("UFORM_ALLOW_MULTICAST");
    if (!allow || strcmp(allow, "1") != 0) setenv("NCCL_NVLS_ENABLE", "0", 1);
    char const *path = getenv("UFORM_NCCL_LIBRARY");
    if (!path || !*path) path = "libnccl.so.2";
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        char const *error = dlerror();
        snprintf(uform_nccl_state.reason, sizeof uform_nccl_state.reason,
                 "NCCL is not available: dlopen(\"%.80s\") failed (%.160s); install NCCL 2.14 or newer, put its "
                 "lib directory on LD_LIBRARY_PATH, or name the library in UFORM_NCCL_LIBRARY",
                 path, error ? error : "unknown error");
        return;
    }
    uform_nccl_t *table = &uform_nccl_state.table;
    struct {
        void **slot;
        char const *symbol;
        bool required;
    } const functions[] = {
        {(void **)&table->GetVersion, "ncclGetVersion", true},
        {(void **)&table->GetUniqueId, "ncclGetUniqueId", true},
        {(void **)&table->CommInitRankConfig, "ncclCommInitRankConfig", true},
        {(void **)&table->CommGetAsyncError, "ncclCommGetAsyncError", true},
        {(void **)&table->CommAbort, "ncclCommAbort", true},
        {(void **)&table->CommDestroy, "ncclCommDestroy", true},
        {(void **)&table->CommFinalize, "ncclCommFinalize", true},
        {(void **)&table->GroupStart, "ncclGroupStart", true},
        {(void **)&table->GroupEnd, "ncclGroupEnd", true},
        {(void **)&table->CommSplit, "ncclCommSplit", false},
        {(void **)&table->AllReduce, "ncclAllReduce", true},
        {(void **)&table->GetErrorString, "ncclGetErrorString", true},
        {(void **)&table->GetLastError, "ncclGetLastError", false},
    };
    for (size_t i = 0; i < sizeof functions / sizeof functions[0]; ++i) {
        *functions[i].slot = dlsym(library, functions[i].symbol);
        if (!*functions[i].slot && functions[i].required) {
            snprintf(uform_nccl_state.reason, sizeof uform_nccl_state.reason,
                     "NCCL is not usable: %.80s lacks %s; NCCL 2.14 or newer is required", path, functions[i].symbol);
            dlclose(library);
            return;
        }
    }
    if (table->GetVersion(&table->version) != uform_nccl_success_k || table->version < 21400) {
        snprintf(uform_nccl_state.reason, sizeof uform_nccl_state.reason,
                 "NCCL is not usable: %.80s reports version %d; 2.14 or newer (21400) is required", path,
                 table->version);
        dlclose(library);
        return;
    }
    uform_nccl_state.ready = true; // the library stays loaded for the process's lifetime
}

uform_status_t uform_nccl(uform_nccl_t const **nccl) {
    pthread_once(&uform_nccl_state.once, nccl_load);
    if (!uform_nccl_state.ready) return uform_fail(uform_status_unsupported_k, "%s", uform_nccl_state.reason);
    if (nccl) *nccl = &uform_nccl_state.table;
    return uform_status_ok_k;
}

uform_status_t uform_nccl_fail(uform_status_t status, uform_nccl_result_t result, uform_nccl_comm_t comm,
                               char const *format, ...) {
    char context[256];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(context, sizeof context, format, arguments);
    va_end(arguments);
    uform_nccl_t const *table = uform_nccl_state.ready ? &uform_nccl_state.table : NULL;
    char const *sentence = table ? table->GetErrorString(result) : NULL;
    char const *last = table && table->GetLastError ? table->GetLastError(comm) : NULL;
    return uform_fail(status, "%s: NCCL %s (%.120s%s%.120s)", context, nccl_result_name(result),
                      sentence ? sentence : "no description", last && *last ? "; " : "", last ? last : "");
}

#else // UFORM_WITH_CUDA

uform_status_t uform_nccl(uform_nccl_t const **nccl) {
    (void)nccl;
    return uform_fail(uform_status_unsupported_k,
                      "NCCL is not available: libuform was built without CUDA (UFORM_WITH_CUDA=OFF or no toolkit)");
}

uform_status_t uform_nccl_fail(uform_status_t status, uform_nccl_result_t result, uform_nccl_comm_t comm,
                               char const *format, ...) {
    (void)comm;
    char context[256];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(context, sizeof context, format, arguments);
    va_end(arguments);
    return uform_fail(status, "%s: NCCL %s", context, nccl_result_name(result));
}

#endif // UFORM_WITH_CUDA
