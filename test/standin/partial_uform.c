/**
 *  @file   partial_uform.c
 *  @brief  A library that calls itself libuform of this ABI but exports nothing else: the bindings
 *          must refuse it as they load (UNSUPPORTED naming the missing function), never abort on the
 *          first call of a symbol it lacks.
 */
#include "uform.h"

#define PARTIAL_STRING(x) #x
#define PARTIAL_VERSION(major, minor, patch) PARTIAL_STRING(major) "." PARTIAL_STRING(minor) "." PARTIAL_STRING(patch)

char const *uform_version(void) { return PARTIAL_VERSION(UFORM_VERSION_MAJOR, UFORM_VERSION_MINOR, UFORM_VERSION_PATCH); }
