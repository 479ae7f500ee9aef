/* kt_device.h — getting a device backend in a test: the test is skipped
 * only where no such device exists at all (a driver or device missing),
 * and fails on any other reason the backend would not start. */
#ifndef KT_DEVICE_H
#define KT_DEVICE_H

#include "kt.h"

static inline kiln_backend *kt_device(const char *name) {
    kiln_backend *b = kiln_backend_get(name);
    if (b) return b;
    if (kiln_last_status() == KILN_ERR_UNSUPPORTED &&
        (strstr(kiln_last_error(), "no Vulkan") || strstr(kiln_last_error(), "built without Vulkan") ||
         strstr(kiln_last_error(), "no CUDA device") ||
         strstr(kiln_last_error(), "built without CUDA")))
        kt_skip(kiln_last_error());
    kt_fail(__FILE__, __LINE__, "backend %s does not start: %s", name, kiln_last_error());
    return NULL;
}

#endif
