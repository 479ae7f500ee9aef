/* vk_runtime.h — the Vulkan backend's own state, shared by its runtime
 * files (device, memory, dispatch); kernels see only vk.h. */
#ifndef KILN_VK_RUNTIME_H
#define KILN_VK_RUNTIME_H

#include "vk.h"

#include <vulkan/vulkan.h>

struct kiln_devbuf {
    VkBuffer buf;
    VkDeviceMemory mem;
    void *map; /* host pointer when the memory is host-visible */
    VkDeviceSize size;
    uint64_t serial;          /* the buffer's number, never reused (a recording's key) */
    kiln_devbuf *prev, *next; /* every live buffer, freed at teardown */
};

typedef struct kiln_vk_pipeline {
    VkShaderModule module;
    VkPipeline pipeline;
    int n_bind;
} kiln_vk_pipeline;

struct kiln_vk {
    kiln_backend base; /* what kiln_backend_get("vulkan") returns; first member */
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem_props;
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    kiln_vk_caps caps;
    unsigned float_modes; /* KILN_VK_*_32 the device supports, added to every shader */
    VkDeviceSize bind_align; /* minStorageBufferOffsetAlignment */
    bool host_visible;       /* tensors live in mappable memory (integrated GPUs, lavapipe) */
    uint32_t mem_type;       /* for tensors */
    uint32_t staging_type;   /* host-visible, coherent */
    kiln_devbuf *live;
    /* pipelines, one per embedded shader, made on first use */
    VkPipelineCache cache;
    char cache_path[512];
    kiln_vk_pipeline *pipes;
    VkDescriptorSetLayout set_layout[KILN_VK_MAX_BIND + 1];
    VkPipelineLayout layout[KILN_VK_MAX_BIND + 1];
    /* recording */
    VkDescriptorPool desc_pool;
    VkCommandPool cmd_pool;
    VkCommandBuffer cmd;
    VkFence fence;
    bool recording;
    /* staging for uploads recorded in the command stream, and downloads */
    kiln_devbuf *staging;
    VkDeviceSize staging_used;
    /* scratch for kernels (kiln__vk_scratch), reused after each submit */
    kiln_devbuf *scratch;
    VkDeviceSize scratch_used;
    /* the computing graph's run number, which dropout reads (vt->set_run) */
    kiln_devbuf *run_word;
    /* a row outside a KV cache, noted by attention_cached (vt->rows_error): host-visible */
    kiln_devbuf *rows_word;
    kiln_vk_kernel kernels[KILN_OP_COUNT];
    /* $KILN_PROFILE: timestamps around each step (vk_profile.c) */
    VkQueryPool prof_pool;
    uint32_t prof_used;     /* queries written in this command buffer */
    int *prof_row;          /* per pair: the profile row */
    long *prof_calls;       /* per pair: 1, or 0 for the rest of a step a flush cut */
    int prof_open;          /* 1 + the row of the step being recorded, its first timestamp written */
    int prof_reopen;        /* 1 + the row to go on with in the next command buffer */
    double prof_ns;         /* timestampPeriod */
    uint64_t prof_mask;     /* timestampValidBits */
    /* graph replay (vk_graph.c): the recording being made (recording into
     * its own command buffer), whether something broke it, and the one the
     * next flush submits after cmd */
    kiln_record *capture;
    bool capture_broken;
    kiln_record *pending;
};

/* vk_device.c */
kiln_status kiln__vk_check(VkResult r, const char *what);

/* vk_memory.c */
kiln_status kiln__vk_memory_init(kiln_vk *vk);
kiln_devbuf *kiln__vk_buffer_new(kiln_vk *vk, VkDeviceSize bytes, uint32_t mem_type, bool zero);
void kiln__vk_buffer_free(kiln_vk *vk, kiln_devbuf *d);
kiln_status kiln__vk_upload(kiln_backend *b, kiln_devbuf *d, size_t off, const void *src, size_t n);
kiln_status kiln__vk_set_run(kiln_backend *b, uint64_t run); /* vt->set_run */
kiln_status kiln__vk_rows_error(kiln_backend *b); /* vt->rows_error */
kiln_status kiln__vk_download(kiln_backend *b, kiln_devbuf *d, size_t off, void *dst, size_t n);
kiln_status kiln__vk_zero(kiln_backend *b, kiln_devbuf *d, size_t off, size_t n);

/* vk_dispatch.c */
kiln_status kiln__vk_dispatch_init(kiln_vk *vk);
void kiln__vk_dispatch_free(kiln_vk *vk);
/* Begin recording if not yet; the command buffer to record into. */
kiln_status kiln__vk_begin(kiln_vk *vk);
/* Make every earlier transfer and dispatch visible to everything after
 * (to the host reading mapped memory). */
void kiln__vk_barrier(kiln_vk *vk);
void kiln__vk_barrier_host(kiln_vk *vk);
/* A descriptor pool of the size every pool has. */
kiln_status kiln__vk_desc_pool(kiln_vk *vk, VkDescriptorPool *pool);
kiln_status kiln__vk_flush(kiln_backend *b);

/* vk_graph.c: the vtable's graph replay entries, and while recording, a
 * new descriptor pool for the recording (the last one is spent) and a
 * staging or scratch buffer outgrown, kept until the recording is freed */
kiln_status kiln__vk_record_begin(kiln_backend *b);
kiln_record *kiln__vk_record_end(kiln_backend *b);
kiln_status kiln__vk_replay(kiln_backend *b, kiln_record *r);
void kiln__vk_record_free(kiln_backend *b, kiln_record *r);
bool kiln__vk_recordable(kiln_backend *b, const kiln_tensor *node);
kiln_status kiln__vk_record_sets(kiln_vk *vk);
kiln_status kiln__vk_record_hold(kiln_vk *vk, kiln_devbuf *d);
VkCommandBuffer kiln__vk_record_cmd(const kiln_record *r);
void kiln__vk_record_ran(kiln_vk *vk, const kiln_record *r); /* its submit's fence signalled */
uint64_t kiln__vk_buffer_id(const kiln_devbuf *d);

/* vk_profile.c: device time per step for $KILN_PROFILE; all do nothing
 * unless it is set and the queue has timestamps */
void kiln__vk_profile_init(kiln_vk *vk);
void kiln__vk_profile_free(kiln_vk *vk);
kiln_status kiln__vk_profile_begin(kiln_vk *vk, int row); /* before a step's commands */
void kiln__vk_profile_end(kiln_vk *vk);                   /* after them */
void kiln__vk_profile_started(kiln_vk *vk);               /* a command buffer began */
void kiln__vk_profile_closing(kiln_vk *vk);               /* it is about to end */
void kiln__vk_profile_collect(kiln_vk *vk);               /* its fence signalled */
/* A recording's timestamps (vk_graph.c): a query pool of its own, reset
 * at the start of its command buffer, and each pair's row, so every
 * replay writes them again and the fence's collect reads them. */
typedef struct kiln_vk_prof_set {
    VkQueryPool pool;
    uint32_t used;
    int *row;
    long *calls;
} kiln_vk_prof_set;
kiln_status kiln__vk_profile_record_new(kiln_vk *vk, VkCommandBuffer cmd, kiln_vk_prof_set *set); /* none: not profiling */
/* the backend's pairs and the set's trade places: the recording's steps stamp into it */
void kiln__vk_profile_record_swap(kiln_vk *vk, kiln_vk_prof_set *set);
void kiln__vk_profile_record_collect(kiln_vk *vk, const kiln_vk_prof_set *set); /* a replay's fence signalled */
void kiln__vk_profile_record_free(kiln_vk *vk, kiln_vk_prof_set *set);

#endif
