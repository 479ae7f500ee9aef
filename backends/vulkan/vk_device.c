/* vk_device.c — starting the Vulkan backend: instance (with the validation
 * layer when $KILN_VULKAN_VALIDATE=1), choosing a device, enabling the
 * features kernels use, the vtable the graph executor calls, its entry
 * in core's table of backends, and teardown at exit.
 *
 * Device choice: a discrete GPU, else an integrated one, else a virtual
 * one, else a CPU implementation (lavapipe); $KILN_VULKAN_DEVICE picks by
 * index in vkEnumeratePhysicalDevices order or by a piece of the name. */
#include "vk_runtime.h"

#include <ctype.h>
#include <stdio.h>

static const char *result_name(VkResult r) {
    switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "out of host memory";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "out of device memory";
    case VK_ERROR_INITIALIZATION_FAILED: return "initialization failed";
    case VK_ERROR_DEVICE_LOST: return "device lost";
    case VK_ERROR_LAYER_NOT_PRESENT: return "layer not present";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "extension not present";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "feature not present";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "no compatible driver";
    case VK_ERROR_TOO_MANY_OBJECTS: return "too many objects";
    case VK_ERROR_FRAGMENTED_POOL: return "fragmented pool";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "out of pool memory";
    default: return "error";
    }
}

kiln_status kiln__vk_check(VkResult r, const char *what) {
    if (r == VK_SUCCESS) return KILN_OK;
    kiln_status s = r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? KILN_ERR_OOM
                                                                                             : KILN_ERR_UNSUPPORTED;
    return kiln__errs(s, "vulkan: %s: %s (VkResult %d)", what, result_name(r), (int)r);
}

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    (void)type;
    kiln_vk *vk = user;
    if (severity < VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) return VK_FALSE;
    __atomic_add_fetch(&vk->base.validation_messages, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "kiln: vulkan validation: %s\n", data->pMessage);
    return VK_FALSE;
}

static bool env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0");
}

static bool has_layer(const char *name) {
    uint32_t n = 0;
    vkEnumerateInstanceLayerProperties(&n, NULL);
    VkLayerProperties *p = kiln__calloc(n ? n : 1, sizeof *p);
    bool found = false;
    if (p && vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++) found |= !strcmp(p[i].layerName, name);
    free(p);
    return found;
}

static kiln_status make_instance(kiln_vk *vk) {
    bool validate = env_on("KILN_VULKAN_VALIDATE");
    const char *layer = "VK_LAYER_KHRONOS_validation";
    const char *ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    if (validate && !has_layer(layer))
        return kiln__errs(KILN_ERR_UNSUPPORTED, "vulkan: $KILN_VULKAN_VALIDATE is set but %s is not installed "
                                                "(Debian: vulkan-validationlayers)", layer);
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "kiln",
                             .pEngineName = "kiln", .apiVersion = VK_API_VERSION_1_2};
    VkDebugUtilsMessengerCreateInfoEXT dbg = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = on_message,
        .pUserData = vk};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    if (validate) {
        ci.enabledLayerCount = 1;
        ci.ppEnabledLayerNames = &layer;
        ci.enabledExtensionCount = 1;
        ci.ppEnabledExtensionNames = &ext;
        ci.pNext = &dbg; /* also reports on instance creation itself */
    }
    VkResult r = vkCreateInstance(&ci, NULL, &vk->instance);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER || r == VK_ERROR_INITIALIZATION_FAILED)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "vulkan: no Vulkan driver found (Debian: mesa-vulkan-drivers gives lavapipe)");
    kiln_status s = kiln__vk_check(r, "vkCreateInstance");
    if (s) return s;
    if (validate) {
        PFN_vkCreateDebugUtilsMessengerEXT make =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(vk->instance, "vkCreateDebugUtilsMessengerEXT");
        if (!make) return kiln__errs(KILN_ERR_UNSUPPORTED, "vulkan: no vkCreateDebugUtilsMessengerEXT");
        if ((s = kiln__vk_check(make(vk->instance, &dbg, NULL, &vk->messenger), "debug messenger"))) return s;
    }
    return KILN_OK;
}

static int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 1;
    default: return 0;
    }
}

static const char *type_name(VkPhysicalDeviceType t) {
    static const char *names[] = {"other", "integrated GPU", "discrete GPU", "virtual GPU", "CPU"};
    return (unsigned)t < 5 ? names[t] : "other";
}

static bool name_has(const char *name, const char *part) {
    for (const char *p = name; *p; p++) {
        size_t i = 0;
        while (part[i] && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)part[i])) i++;
        if (!part[i]) return true;
    }
    return false;
}

/* A queue family with compute, or -1. */
static int compute_family(VkPhysicalDevice pd) {
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
    VkQueueFamilyProperties q[16];
    if (n > 16) n = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q);
    for (uint32_t i = 0; i < n; i++)
        if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return (int)i;
    return -1;
}

static kiln_status pick_device(kiln_vk *vk) {
    uint32_t n = 0;
    kiln_status s = kiln__vk_check(vkEnumeratePhysicalDevices(vk->instance, &n, NULL), "listing devices");
    if (s) return s;
    if (!n) return kiln__errs(KILN_ERR_UNSUPPORTED, "vulkan: no Vulkan device found");
    VkPhysicalDevice devs[16];
    if (n > 16) n = 16;
    if ((s = kiln__vk_check(vkEnumeratePhysicalDevices(vk->instance, &n, devs), "listing devices"))) return s;
    const char *want = getenv("KILN_VULKAN_DEVICE");
    int best = -1, best_rank = -1;
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(devs[i], &p);
        if (p.apiVersion < VK_API_VERSION_1_2 || compute_family(devs[i]) < 0) continue;
        if (want && *want) {
            char *end;
            long idx = strtol(want, &end, 10);
            bool match = *end ? name_has(p.deviceName, want) : idx == (long)i;
            if (match) {
                best = (int)i;
                break;
            }
            continue;
        }
        if (type_rank(p.deviceType) > best_rank) best = (int)i, best_rank = type_rank(p.deviceType);
    }
    if (best < 0)
        return kiln__errs(KILN_ERR_UNSUPPORTED, want && *want ? "vulkan: no Vulkan 1.2 device matches KILN_VULKAN_DEVICE='%s'"
                                                              : "vulkan: no Vulkan 1.2 device with a compute queue%s",
                          want && *want ? want : "");
    vk->phys = devs[best];
    vk->queue_family = (uint32_t)compute_family(vk->phys);
    vkGetPhysicalDeviceProperties(vk->phys, &vk->props);
    vkGetPhysicalDeviceMemoryProperties(vk->phys, &vk->mem_props);
    return KILN_OK;
}

/* Does the device offer extension name? */
static bool has_device_ext(VkPhysicalDevice phys, const char *name) {
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL) != VK_SUCCESS || !n) return false;
    VkExtensionProperties *p = malloc(n * sizeof *p);
    bool found = false;
    if (p && vkEnumerateDeviceExtensionProperties(phys, NULL, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++) found |= !strcmp(p[i].extensionName, name);
    free(p);
    return found;
}

/* The logical device, with the optional features kernels can use. */
static kiln_status make_device(kiln_vk *vk) {
    /* packed int8 dot products (quant_qmv.glsl), an extension under 1.2;
     * $KILN_VULKAN_NO_INT_DOT=1 leaves them off (the tests' plain path) */
    const char *dot_ext = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
    const bool has_dot = has_device_ext(vk->phys, dot_ext);
    VkPhysicalDeviceShaderIntegerDotProductFeatures fdot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = has_dot ? &fdot : NULL};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &f11};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(vk->phys, &f);
    const bool int_dot = has_dot && fdot.shaderIntegerDotProduct && !env_on("KILN_VULKAN_NO_INT_DOT");
    VkPhysicalDeviceShaderIntegerDotProductFeatures edot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES, .shaderIntegerDotProduct = VK_TRUE};
    VkPhysicalDeviceVulkan11Features e11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = int_dot ? &edot : NULL,
                                            .storageBuffer16BitAccess = f11.storageBuffer16BitAccess};
    VkPhysicalDeviceVulkan12Features e12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &e11,
                                            .shaderFloat16 = f12.shaderFloat16,
                                            .storageBuffer8BitAccess = f12.storageBuffer8BitAccess,
                                            .shaderInt8 = f12.shaderInt8};
    VkPhysicalDeviceFeatures2 e = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &e12};
    e.features.shaderInt64 = f.features.shaderInt64;
    e.features.shaderInt16 = f.features.shaderInt16;
    e.features.shaderFloat64 = f.features.shaderFloat64;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo q = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = vk->queue_family,
                                 .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &e, .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &q, .enabledExtensionCount = int_dot, .ppEnabledExtensionNames = &dot_ext};
    kiln_status s = kiln__vk_check(vkCreateDevice(vk->phys, &ci, NULL, &vk->dev), "vkCreateDevice");
    if (s) return s;
    vkGetDeviceQueue(vk->dev, vk->queue_family, 0, &vk->queue);

    VkPhysicalDeviceVulkan12Properties p12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sub = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
                                              .pNext = &p12};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sub};
    vkGetPhysicalDeviceProperties2(vk->phys, &p2);
    /* f32 as the CPU has it, where the device lets the shaders ask (float
     * controls are core in 1.2); with no independence between widths a
     * 32-bit denormal mode would bind the 16- and 64-bit ones too */
    vk->float_modes = (p12.shaderSignedZeroInfNanPreserveFloat32 ? KILN_VK_SZ_INF_NAN_PRESERVE_32 : 0) |
                      (p12.shaderDenormPreserveFloat32 &&
                               p12.denormBehaviorIndependence != VK_SHADER_FLOAT_CONTROLS_INDEPENDENCE_NONE
                           ? KILN_VK_DENORM_PRESERVE_32
                           : 0);
    const VkPhysicalDeviceLimits *l = &vk->props.limits;
    vk->caps = (kiln_vk_caps){
        .subgroup_size = sub.subgroupSize,
        .max_invocations = l->maxComputeWorkGroupInvocations,
        .max_shared_bytes = l->maxComputeSharedMemorySize,
        .max_groups = {l->maxComputeWorkGroupCount[0], l->maxComputeWorkGroupCount[1], l->maxComputeWorkGroupCount[2]},
        .max_range = l->maxStorageBufferRange,
        .f16 = e12.shaderFloat16 && e11.storageBuffer16BitAccess,
        .int64 = e.features.shaderInt64,
        .f64 = e.features.shaderFloat64,
        .loop_budget = p12.driverID == VK_DRIVER_ID_MESA_LLVMPIPE ? 65535u : 0u,
        .fma_fused = p12.driverID != VK_DRIVER_ID_MESA_LLVMPIPE,
        .int_dot = int_dot,
    };
    vk->bind_align = l->minStorageBufferOffsetAlignment;
    return KILN_OK;
}

/* ---- the vtable ---- */

static bool vk_supports(kiln_backend *b, const kiln_tensor *node) {
    kiln_vk *vk = (kiln_vk *)b;
    const kiln_vk_kernel *k = &vk->kernels[node->op];
    if (!kiln__vk_dtype_ok(node->dtype)) return false;
    for (int i = 0; i < node->nsrc; i++)
        if (node->src[i] && !kiln__vk_dtype_ok(node->src[i]->dtype)) return false;
    return k->supports && k->record && k->supports(vk, node);
}

static kiln_status vk_compute(kiln_backend *b, kiln_tensor *node, const kiln_exec *ex) {
    kiln_vk *vk = (kiln_vk *)b;
    kiln_status s = ex->profile ? kiln__vk_profile_begin(vk, ex->profile - 1) : KILN_OK;
    if (!s) s = vk->kernels[node->op].record(vk, node, ex);
    kiln__vk_profile_end(vk);
    return s;
}

static kiln_status vk_compute_chain(kiln_backend *b, kiln_tensor *const *nodes, int n, const kiln_exec *ex) {
    kiln_vk *vk = (kiln_vk *)b;
    kiln_status s = ex->profile ? kiln__vk_profile_begin(vk, ex->profile - 1) : KILN_OK;
    if (!s) s = kiln__vk_chain_record(vk, nodes, n);
    kiln__vk_profile_end(vk);
    return s;
}

static kiln_devbuf *vk_alloc(kiln_backend *b, size_t bytes) {
    kiln_vk *vk = (kiln_vk *)b;
    return kiln__vk_buffer_new(vk, bytes, vk->mem_type, true);
}

static void vk_free(kiln_backend *b, kiln_devbuf *d) {
    kiln_vk *vk = (kiln_vk *)b;
    kiln__vk_flush(b); /* the buffer may be in recorded work */
    kiln__vk_buffer_free(vk, d);
}

static const kiln_backend_vt vk_vt = {
    .supports = vk_supports,
    .alloc = vk_alloc,
    .free = vk_free,
    .upload = kiln__vk_upload,
    .download = kiln__vk_download,
    .zero = kiln__vk_zero,
    .compute = vk_compute,
    .flush = kiln__vk_flush,
    .fuses = KILN_FUSE_CHAIN | KILN_FUSE_ACC,
    .compute_chain = vk_compute_chain,
    .record_begin = kiln__vk_record_begin,
    .record_end = kiln__vk_record_end,
    .replay = kiln__vk_replay,
    .record_free = kiln__vk_record_free,
    .recordable = kiln__vk_recordable,
    .buffer_id = kiln__vk_buffer_id,
    .set_run = kiln__vk_set_run,
    .rows_error = kiln__vk_rows_error,
};

/* ---- start and teardown ---- */

static kiln_vk *the_vk;

static void destroy(kiln_vk *vk) {
    if (vk->dev) {
        vkDeviceWaitIdle(vk->dev);
        kiln__vk_dispatch_free(vk);
        while (vk->live) kiln__vk_buffer_free(vk, vk->live);
        vkDestroyDevice(vk->dev, NULL);
    }
    if (vk->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT kill =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(vk->instance, "vkDestroyDebugUtilsMessengerEXT");
        if (kill) kill(vk->instance, vk->messenger, NULL);
    }
    if (vk->instance) vkDestroyInstance(vk->instance, NULL);
    free(vk);
}

static void teardown(void) {
    if (the_vk) destroy(the_vk);
    the_vk = NULL;
}

static kiln_backend *vk_open(void) {
    kiln_vk *vk = kiln__calloc(1, sizeof *vk);
    if (!vk) return kiln__err(KILN_ERR_OOM, "vulkan: out of memory");
    vk->base.name = "vulkan";
    vk->base.vt = &vk_vt;
    vk->base.impl = vk;
    kiln_status s = make_instance(vk);
    if (!s) s = pick_device(vk);
    if (!s) s = make_device(vk);
    if (!s) s = kiln__vk_memory_init(vk);
    if (!s) s = kiln__vk_dispatch_init(vk);
    if (!s) kiln__vk_profile_init(vk);
    if (s) {
        destroy(vk);
        return NULL;
    }
    uint32_t v = vk->props.apiVersion;
    snprintf(vk->base.device, sizeof vk->base.device, "%s (%s, Vulkan %u.%u)", vk->props.deviceName,
             type_name(vk->props.deviceType), VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v));
    kiln__vk_register_elementwise(vk->kernels);
    kiln__vk_register_reduce(vk->kernels);
    kiln__vk_register_matmul(vk->kernels);
    kiln__vk_register_movement(vk->kernels);
    kiln__vk_register_rows(vk->kernels);
    kiln__vk_register_nn(vk->kernels);
    kiln__vk_register_attention(vk->kernels);
    kiln__vk_register_conv(vk->kernels);
    kiln__vk_register_optim(vk->kernels);
    kiln__vk_register_optim_8bit(vk->kernels);
    kiln__vk_register_optim_apollo(vk->kernels);
    kiln__vk_register_optim_galore(vk->kernels);
    kiln__vk_register_quant(vk->kernels);
    the_vk = vk;
    atexit(teardown);
    return &vk->base;
}

/* started by the first kiln_backend_get("vulkan") */
__attribute__((constructor)) static void vk_register(void) { kiln__backend_register("vulkan", vk_open, false); }

const kiln_vk_caps *kiln__vk_caps(const kiln_vk *vk) { return &vk->caps; }
