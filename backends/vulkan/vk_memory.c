/* vk_memory.c — device memory for the Vulkan backend: choosing memory
 * types by their property flags, buffers, and host<->device copies.
 *
 * Tensors go in device-local memory. Where that memory is also host-visible
 * and coherent (integrated GPUs, lavapipe) it stays mapped and reads are a
 * memcpy; otherwise (discrete GPUs) copies pass through a host-visible
 * staging buffer. Uploads are recorded in the command stream, staged, so
 * they keep their order with the kernels around them and never wait;
 * downloads wait for the recorded work first. */
#include "vk_runtime.h"

#define STAGING_MIN (4u << 20)

/* The first memory type in `bits` having all of `want` (and, if possible, `prefer`), or -1. */
static int find_type(const kiln_vk *vk, uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer) {
    int found = -1;
    for (uint32_t i = 0; i < vk->mem_props.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = vk->mem_props.memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || (f & want) != want) continue;
        if ((f & prefer) == prefer) return (int)i;
        if (found < 0) found = (int)i;
    }
    return found;
}

kiln_status kiln__vk_memory_init(kiln_vk *vk) {
    const VkMemoryPropertyFlags local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                                host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int t = -1;
    /* a discrete GPU's host-visible device memory is a small window (BAR): keep tensors out of it */
    if (vk->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) t = find_type(vk, ~0u, local | host, 0);
    vk->host_visible = t >= 0;
    if (t < 0) t = find_type(vk, ~0u, local, 0);
    if (t < 0) t = find_type(vk, ~0u, host, 0), vk->host_visible = t >= 0;
    int st = find_type(vk, ~0u, host, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (t < 0 || st < 0) return kiln__errs(KILN_ERR_UNSUPPORTED, "vulkan: the device offers no usable memory type");
    vk->mem_type = (uint32_t)t;
    vk->staging_type = (uint32_t)st;
    return KILN_OK;
}

kiln_devbuf *kiln__vk_buffer_new(kiln_vk *vk, VkDeviceSize bytes, uint32_t mem_type, bool zero) {
    kiln_devbuf *d = kiln__calloc(1, sizeof *d);
    if (!d) return kiln__err(KILN_ERR_OOM, "vulkan: out of memory");
    bytes = (bytes + 15) & ~(VkDeviceSize)15;
    d->size = bytes;
    static uint64_t serials;
    d->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = bytes,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    kiln_status s = kiln__vk_check(vkCreateBuffer(vk->dev, &bi, NULL, &d->buf), "creating a buffer");
    VkMemoryRequirements req = {0};
    int type = -1;
    if (!s) {
        vkGetBufferMemoryRequirements(vk->dev, d->buf, &req);
        VkMemoryPropertyFlags want = vk->mem_props.memoryTypes[mem_type].propertyFlags;
        type = req.memoryTypeBits & (1u << mem_type) ? (int)mem_type : find_type(vk, req.memoryTypeBits, want, 0);
        if (type < 0) s = kiln__errs(KILN_ERR_UNSUPPORTED, "vulkan: no memory type fits a buffer");
    }
    if (!s) {
        VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size,
                                   .memoryTypeIndex = (uint32_t)type};
        s = kiln__vk_check(vkAllocateMemory(vk->dev, &ai, NULL, &d->mem), "allocating device memory");
        if (s) kiln__errs(s, "vulkan: cannot allocate %llu bytes of device memory", (unsigned long long)bytes);
    }
    if (!s) s = kiln__vk_check(vkBindBufferMemory(vk->dev, d->buf, d->mem, 0), "binding buffer memory");
    if (!s && vk->mem_props.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)
        s = kiln__vk_check(vkMapMemory(vk->dev, d->mem, 0, VK_WHOLE_SIZE, 0, &d->map), "mapping memory");
    if (s) {
        if (d->buf) vkDestroyBuffer(vk->dev, d->buf, NULL);
        if (d->mem) vkFreeMemory(vk->dev, d->mem, NULL);
        free(d);
        return NULL;
    }
    d->next = vk->live;
    if (vk->live) vk->live->prev = d;
    vk->live = d;
    if (zero) {
        if (d->map) memset(d->map, 0, bytes); /* a new buffer is in no recorded work */
        else if ((s = kiln__vk_zero(&vk->base, d, 0, bytes))) {
            kiln__vk_buffer_free(vk, d);
            return NULL;
        }
    }
    return d;
}

void kiln__vk_buffer_free(kiln_vk *vk, kiln_devbuf *d) {
    if (!d) return;
    if (d->prev) d->prev->next = d->next;
    else vk->live = d->next;
    if (d->next) d->next->prev = d->prev;
    if (d->map) vkUnmapMemory(vk->dev, d->mem);
    vkDestroyBuffer(vk->dev, d->buf, NULL);
    vkFreeMemory(vk->dev, d->mem, NULL);
    free(d);
}

/* Room for n bytes in the staging buffer; may submit recorded work to
 * reuse it. Returns the offset. */
static kiln_status staging_take(kiln_vk *vk, VkDeviceSize n, VkDeviceSize *off) {
    kiln_status s;
    if (vk->staging && vk->staging_used + n > vk->staging->size && !vk->capture && vk->recording &&
        (s = kiln__vk_flush(&vk->base)))
        return s;
    if (!vk->staging || vk->staging_used + n > vk->staging->size) {
        VkDeviceSize size = vk->staging ? 2 * vk->staging->size : STAGING_MIN;
        while (size < n) size *= 2;
        /* a recording's copies read the old one on every replay */
        s = vk->capture ? kiln__vk_record_hold(vk, vk->staging) : KILN_OK;
        if (!vk->capture) kiln__vk_buffer_free(vk, vk->staging);
        vk->staging = NULL;
        if (s) return s;
        vk->staging_used = 0;
        if (!(vk->staging = kiln__vk_buffer_new(vk, size, vk->staging_type, false))) return kiln_last_status();
    }
    *off = vk->staging_used;
    vk->staging_used = (vk->staging_used + n + 63) & ~(VkDeviceSize)63;
    return KILN_OK;
}

kiln_status kiln__vk_upload(kiln_backend *b, kiln_devbuf *d, size_t off, const void *src, size_t n) {
    kiln_vk *vk = (kiln_vk *)b;
    if (!n) return KILN_OK;
    if (d->map && !vk->recording) { /* nothing in flight can touch it */
        memcpy((char *)d->map + off, src, n);
        return KILN_OK;
    }
    VkDeviceSize at;
    kiln_status s = staging_take(vk, n, &at);
    if (s || (s = kiln__vk_begin(vk))) return s;
    memcpy((char *)vk->staging->map + at, src, n);
    VkBufferCopy region = {.srcOffset = at, .dstOffset = off, .size = n};
    vkCmdCopyBuffer(vk->cmd, vk->staging->buf, d->buf, 1, &region);
    kiln__vk_barrier(vk);
    return KILN_OK;
}

kiln_status kiln__vk_set_run(kiln_backend *b, uint64_t run) {
    kiln_vk *vk = (kiln_vk *)b;
    if (!vk->run_word && !(vk->run_word = kiln__vk_buffer_new(vk, sizeof run, vk->mem_type, false)))
        return kiln_last_status();
    return kiln__vk_upload(b, vk->run_word, 0, &run, sizeof run);
}

/* d's first n I32 words as a bindable tensor */
static void word_tensor(kiln_devbuf *d, int64_t n, kiln_tensor *out) {
    memset(out, 0, sizeof *out);
    out->dtype = KILN_I32;
    out->ndim = 1;
    out->shape[0] = n;
    out->stride[0] = 1;
    out->dbuf = d;
}

kiln_status kiln__vk_run_word(const kiln_vk *vk, kiln_tensor *out) {
    if (!vk->run_word) return kiln__errs(KILN_ERR_STATE, "vulkan: dropout: no run number (vt->set_run not called)");
    word_tensor(vk->run_word, 2, out);
    return KILN_OK;
}

enum { ROWS_WORDS = 6 }; /* flag, row, seq, pos, B, S */

kiln_status kiln__vk_rows_word(kiln_vk *vk, kiln_tensor *out) {
    /* host-visible: read after the fence with no copy (each submit ends in a host barrier) */
    if (!vk->rows_word && !(vk->rows_word = kiln__vk_buffer_new(vk, ROWS_WORDS * sizeof(int32_t), vk->staging_type, true)))
        return kiln_last_status();
    word_tensor(vk->rows_word, ROWS_WORDS, out);
    return KILN_OK;
}

kiln_status kiln__vk_rows_error(kiln_backend *b) {
    kiln_vk *vk = (kiln_vk *)b;
    int32_t *w = vk->rows_word ? vk->rows_word->map : NULL;
    if (!w || !w[0]) return KILN_OK;
    kiln_status s = kiln__errs(KILN_ERR_ARG, "attention_cached: row %d's sequence %d, position %d is outside the cache's "
                               "%d sequences of %d positions", w[1], w[2], w[3], w[4], w[5]);
    memset(w, 0, ROWS_WORDS * sizeof *w); /* the compute is over: no work writes it now */
    return s;
}

kiln_status kiln__vk_download(kiln_backend *b, kiln_devbuf *d, size_t off, void *dst, size_t n) {
    kiln_vk *vk = (kiln_vk *)b;
    kiln_status s = kiln__vk_flush(b);
    if (s || !n) return s;
    if (d->map) {
        memcpy(dst, (char *)d->map + off, n);
        return KILN_OK;
    }
    VkDeviceSize at;
    if ((s = staging_take(vk, n, &at)) || (s = kiln__vk_begin(vk))) return s;
    VkBufferCopy region = {.srcOffset = off, .dstOffset = at, .size = n};
    vkCmdCopyBuffer(vk->cmd, d->buf, vk->staging->buf, 1, &region);
    if ((s = kiln__vk_flush(b))) return s;
    memcpy(dst, (char *)vk->staging->map + at, n);
    return KILN_OK;
}

kiln_status kiln__vk_zero(kiln_backend *b, kiln_devbuf *d, size_t off, size_t n) {
    kiln_vk *vk = (kiln_vk *)b;
    kiln_status s = n ? kiln__vk_begin(vk) : KILN_OK;
    if (s || !n) return s;
    vkCmdFillBuffer(vk->cmd, d->buf, off, n, 0);
    kiln__vk_barrier(vk);
    return KILN_OK;
}
