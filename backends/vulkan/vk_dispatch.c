/* vk_dispatch.c — recording kernels for the Vulkan backend: pipelines made
 * on first use from the embedded SPIR-V (through a VkPipelineCache kept on
 * disk), one descriptor set per dispatch, one command buffer that collects
 * every dispatch and copy of a graph's compute and is submitted once, with
 * a fence, when the host needs the results (with a replayed graph's own
 * command buffer after it: vk_graph.c). */
#include "vk_runtime.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define SETS_PER_POOL 1024

/* ---- the pipeline cache file ---- */

/* $KILN_VULKAN_PIPELINE_CACHE names the file ("" or "0": none); by default
 * $XDG_CACHE_HOME/kiln or ~/.cache/kiln. */
static void cache_path(kiln_vk *vk) {
    const char *env = getenv("KILN_VULKAN_PIPELINE_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    vk->cache_path[0] = 0;
    if (env) {
        if (strcmp(env, "0")) snprintf(vk->cache_path, sizeof vk->cache_path, "%s", env);
        return;
    }
    char dir[400];
    if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/kiln", xdg);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/kiln", home);
    else return;
    snprintf(vk->cache_path, sizeof vk->cache_path, "%s/vulkan-%04x-%04x.pipelines", dir, vk->props.vendorID,
             vk->props.deviceID);
}

/* The saved cache, if it was made by this very device and driver. */
static void *cache_load(kiln_vk *vk, size_t *n) {
    *n = 0;
    FILE *f = vk->cache_path[0] ? fopen(vk->cache_path, "rb") : NULL;
    if (!f) return NULL;
    void *data = NULL;
    long len = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (len > 32 && len < (64l << 20) && !fseek(f, 0, SEEK_SET) && (data = kiln__malloc((size_t)len)) &&
        fread(data, 1, (size_t)len, f) == (size_t)len) {
        /* header: length, version, vendor, device (uint32 each), then the cache UUID */
        uint32_t h[4];
        memcpy(h, data, sizeof h);
        if (h[0] >= 32 && h[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE && h[2] == vk->props.vendorID &&
            h[3] == vk->props.deviceID && !memcmp((char *)data + 16, vk->props.pipelineCacheUUID, VK_UUID_SIZE))
            *n = (size_t)len;
    }
    fclose(f);
    if (!*n) {
        free(data);
        data = NULL;
    }
    return data;
}

/* Written whole to a temporary file, then renamed over the old one. */
static void cache_save(kiln_vk *vk) {
    size_t n = 0;
    if (!vk->cache_path[0] || vkGetPipelineCacheData(vk->dev, vk->cache, &n, NULL) != VK_SUCCESS || !n) return;
    void *data = kiln__malloc(n);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", vk->cache_path, (int)getpid());
    char *slash = strrchr(vk->cache_path, '/');
    if (slash) { /* make the directory (one level, and its parent ~/.cache) */
        char dir[512];
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - vk->cache_path), vk->cache_path);
        char *up = strrchr(dir, '/');
        if (up) {
            *up = 0;
            mkdir(dir, 0755);
            *up = '/';
        }
        mkdir(dir, 0755);
    }
    FILE *f = data && vkGetPipelineCacheData(vk->dev, vk->cache, &n, data) == VK_SUCCESS ? fopen(tmp, "wb") : NULL;
    if (f) {
        bool ok = fwrite(data, 1, n, f) == n;
        ok &= fclose(f) == 0;
        if (!ok || rename(tmp, vk->cache_path)) remove(tmp);
    }
    free(data);
}

/* ---- setup ---- */

kiln_status kiln__vk_desc_pool(kiln_vk *vk, VkDescriptorPool *pool) {
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = SETS_PER_POOL * KILN_VK_MAX_BIND};
    VkDescriptorPoolCreateInfo dp = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = SETS_PER_POOL,
                                     .poolSizeCount = 1, .pPoolSizes = &ps};
    return kiln__vk_check(vkCreateDescriptorPool(vk->dev, &dp, NULL, pool), "descriptor pool");
}

kiln_status kiln__vk_dispatch_init(kiln_vk *vk) {
    kiln_status s = KILN_OK;
    vk->pipes = kiln__calloc((size_t)kiln__vk_n_shaders + 1, sizeof *vk->pipes);
    if (!vk->pipes) return kiln__errs(KILN_ERR_OOM, "vulkan: out of memory");
    VkDescriptorSetLayoutBinding bind[KILN_VK_MAX_BIND];
    for (int i = 0; i < KILN_VK_MAX_BIND; i++)
        bind[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkPushConstantRange push = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = KILN_VK_MAX_PUSH};
    for (int n = 1; n <= KILN_VK_MAX_BIND && !s; n++) {
        VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                              .bindingCount = (uint32_t)n, .pBindings = bind};
        s = kiln__vk_check(vkCreateDescriptorSetLayout(vk->dev, &li, NULL, &vk->set_layout[n]), "descriptor set layout");
        VkPipelineLayoutCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                         .pSetLayouts = &vk->set_layout[n], .pushConstantRangeCount = 1,
                                         .pPushConstantRanges = &push};
        if (!s) s = kiln__vk_check(vkCreatePipelineLayout(vk->dev, &pi, NULL, &vk->layout[n]), "pipeline layout");
    }
    if (!s) s = kiln__vk_desc_pool(vk, &vk->desc_pool);
    VkCommandPoolCreateInfo cp = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT, .queueFamilyIndex = vk->queue_family};
    if (!s) s = kiln__vk_check(vkCreateCommandPool(vk->dev, &cp, NULL, &vk->cmd_pool), "command pool");
    VkCommandBufferAllocateInfo ca = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = vk->cmd_pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    if (!s) s = kiln__vk_check(vkAllocateCommandBuffers(vk->dev, &ca, &vk->cmd), "command buffer");
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (!s) s = kiln__vk_check(vkCreateFence(vk->dev, &fi, NULL, &vk->fence), "fence");
    if (s) return s;
    cache_path(vk);
    size_t n = 0;
    void *data = cache_load(vk, &n);
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO, .initialDataSize = n,
                                    .pInitialData = data};
    s = kiln__vk_check(vkCreatePipelineCache(vk->dev, &ci, NULL, &vk->cache), "pipeline cache");
    free(data);
    return s;
}

void kiln__vk_dispatch_free(kiln_vk *vk) {
    if (vk->cache) {
        cache_save(vk);
        vkDestroyPipelineCache(vk->dev, vk->cache, NULL);
    }
    for (int i = 0; vk->pipes && i < kiln__vk_n_shaders; i++) {
        if (vk->pipes[i].pipeline) vkDestroyPipeline(vk->dev, vk->pipes[i].pipeline, NULL);
        if (vk->pipes[i].module) vkDestroyShaderModule(vk->dev, vk->pipes[i].module, NULL);
    }
    free(vk->pipes);
    for (int n = 1; n <= KILN_VK_MAX_BIND; n++) {
        if (vk->layout[n]) vkDestroyPipelineLayout(vk->dev, vk->layout[n], NULL);
        if (vk->set_layout[n]) vkDestroyDescriptorSetLayout(vk->dev, vk->set_layout[n], NULL);
    }
    kiln__vk_profile_free(vk);
    if (vk->fence) vkDestroyFence(vk->dev, vk->fence, NULL);
    if (vk->cmd_pool) vkDestroyCommandPool(vk->dev, vk->cmd_pool, NULL);
    if (vk->desc_pool) vkDestroyDescriptorPool(vk->dev, vk->desc_pool, NULL);
}

/* ---- pipelines ---- */

static kiln_status pipeline(kiln_vk *vk, const char *name, int n_bind, kiln_vk_pipeline **out) {
    int i = 0;
    while (i < kiln__vk_n_shaders && strcmp(kiln__vk_shaders[i].name, name)) i++;
    if (i == kiln__vk_n_shaders) return kiln__errs(KILN_ERR_UNSUPPORTED, "vulkan: no shader named '%s' was built", name);
    kiln_vk_pipeline *p = &vk->pipes[i];
    if (!p->pipeline) {
        uint32_t *words = NULL;
        size_t n_words = 0;
        kiln_status s = kiln__vk_spirv_float_modes(kiln__vk_shaders[i].words, kiln__vk_shaders[i].bytes / 4,
                                                   vk->float_modes, &words, &n_words);
        VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                       .codeSize = n_words * 4, .pCode = words};
        if (!s) s = kiln__vk_check(vkCreateShaderModule(vk->dev, &mi, NULL, &p->module), name);
        free(words);
        VkComputePipelineCreateInfo ci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                      .module = p->module, .pName = "main"},
            .layout = vk->layout[n_bind]};
        if (!s) s = kiln__vk_check(vkCreateComputePipelines(vk->dev, vk->cache, 1, &ci, NULL, &p->pipeline), name);
        if (s) return s;
        p->n_bind = n_bind;
    }
    if (p->n_bind != n_bind)
        return kiln__errs(KILN_ERR_ARG, "vulkan: shader '%s' dispatched with %d bindings, made with %d", name, n_bind,
                          p->n_bind);
    *out = p;
    return KILN_OK;
}

/* ---- recording ---- */

kiln_status kiln__vk_begin(kiln_vk *vk) {
    if (vk->recording) return KILN_OK;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    kiln_status s = kiln__vk_check(vkBeginCommandBuffer(vk->cmd, &bi), "vkBeginCommandBuffer");
    vk->recording = !s;
    if (!s) kiln__vk_profile_started(vk);
    return s;
}

static void barrier_to(kiln_vk *vk, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = dst_access};
    vkCmdPipelineBarrier(vk->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, dst_stage, 0, 1,
                         &mb, 0, NULL, 0, NULL);
}

void kiln__vk_barrier(kiln_vk *vk) {
    /* also orders reads before later writes (the planner reuses memory) */
    barrier_to(vk, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
               VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                   VK_ACCESS_TRANSFER_WRITE_BIT);
}

void kiln__vk_barrier_host(kiln_vk *vk) { barrier_to(vk, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT); }

kiln_status kiln__vk_flush(kiln_backend *b) {
    kiln_vk *vk = (kiln_vk *)b;
    if (vk->capture) { /* a recording cannot submit half of itself */
        vk->capture_broken = true;
        return kiln__errs(KILN_ERR_UNSUPPORTED, "vulkan: a graph's recording would have to submit");
    }
    if (!vk->recording && !vk->pending) return KILN_OK;
    kiln_status s = KILN_OK;
    VkCommandBuffer cmds[2];
    uint32_t n = 0;
    if (vk->recording) {
        kiln__vk_profile_closing(vk);
        kiln__vk_barrier_host(vk);
        vk->recording = false;
        s = kiln__vk_check(vkEndCommandBuffer(vk->cmd), "vkEndCommandBuffer");
        cmds[n++] = vk->cmd;
    }
    const kiln_record *ran = vk->pending;
    if (ran) cmds[n++] = kiln__vk_record_cmd(ran); /* a replayed graph, after its uploads */
    vk->pending = NULL;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = n, .pCommandBuffers = cmds};
    if (!s) s = kiln__vk_check(vkQueueSubmit(vk->queue, 1, &si, vk->fence), "vkQueueSubmit");
    if (!s) s = kiln__vk_check(vkWaitForFences(vk->dev, 1, &vk->fence, VK_TRUE, UINT64_MAX), "waiting for the device");
    if (!s) kiln__vk_profile_collect(vk);
    if (!s && ran) kiln__vk_record_ran(vk, ran);
    if (!s) s = kiln__vk_check(vkResetFences(vk->dev, 1, &vk->fence), "vkResetFences");
    vkResetCommandPool(vk->dev, vk->cmd_pool, 0);
    vkResetDescriptorPool(vk->dev, vk->desc_pool, 0);
    vk->staging_used = 0;
    vk->scratch_used = 0;
    return s;
}

kiln_status kiln__vk_scratch_n(kiln_vk *vk, int k, const int64_t *n, const kiln_dtype *dt, kiln_tensor *out) {
    VkDeviceSize align = vk->bind_align, bytes[8], need = 0;
    if (k < 1 || k > 8) return kiln__errs(KILN_ERR_ARG, "vulkan scratch: %d pieces (1 to 8)", k);
    for (int i = 0; i < k; i++) {
        bytes[i] = ((VkDeviceSize)(n[i] > 0 ? n[i] : 1) * kiln__types[dt[i]].size + 15) & ~(VkDeviceSize)15;
        need += bytes[i] + align; /* room to align each piece */
    }
    VkDeviceSize at = (vk->scratch_used + align - 1) & ~(align - 1);
    kiln_status s;
    if (!vk->scratch || at + need > vk->scratch->size) {
        /* a bigger buffer for all k pieces at once; the old one may still
         * be in recorded work */
        VkDeviceSize size = vk->scratch ? 2 * vk->scratch->size : (VkDeviceSize)1 << 20;
        while (size < need) size *= 2;
        if (vk->capture) s = kiln__vk_record_hold(vk, vk->scratch); /* the recording's dispatches bind it */
        else if (!(s = kiln__vk_flush(&vk->base))) kiln__vk_buffer_free(vk, vk->scratch);
        vk->scratch = NULL;
        if (s) return s;
        if (!(vk->scratch = kiln__vk_buffer_new(vk, size, vk->mem_type, false))) return kiln_last_status();
        at = 0;
    }
    for (int i = 0; i < k; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].dtype = dt[i];
        out[i].ndim = 1;
        out[i].shape[0] = n[i];
        out[i].stride[0] = 1;
        out[i].dbuf = vk->scratch;
        out[i].doff = at;
        at = (at + bytes[i] + align - 1) & ~(align - 1);
    }
    vk->scratch_used = at;
    return KILN_OK;
}

kiln_status kiln__vk_scratch(kiln_vk *vk, int64_t n, kiln_dtype dt, kiln_tensor *out) {
    return kiln__vk_scratch_n(vk, 1, &n, &dt, out);
}

kiln_status kiln__vk_write(kiln_vk *vk, const kiln_tensor *t, const void *src, size_t n) {
    return kiln__vk_upload(&vk->base, t->dbuf, t->doff, src, n);
}

uint32_t kiln__vk_base(const kiln_vk *vk, const kiln_tensor *t) {
    size_t rem = t->doff & (size_t)(vk->bind_align - 1);
    return (uint32_t)(kiln__is_quant(t->dtype) ? rem : rem / kiln__types[t->dtype].size);
}

bool kiln__vk_fits(const kiln_vk *vk, const kiln_tensor *t) {
    uint64_t last = 0; /* the farthest element the shape and strides reach */
    for (int i = 0; i < t->ndim; i++) {
        if (t->stride[i] < 0) return false;
        last += (uint64_t)(t->shape[i] - 1) * (uint64_t)t->stride[i];
    }
    /* a quantized view keeps whole blocks (core/tensor.c): its elements
     * end on a block boundary */
    const uint64_t blck = (uint64_t)kiln__types[t->dtype].blck;
    uint64_t bytes = (last + blck) / blck * kiln__types[t->dtype].size + vk->bind_align;
    return bytes <= vk->caps.max_range && last < UINT32_MAX;
}

void kiln__vk_groups_1d(const kiln_vk *vk, uint64_t n, uint32_t local, uint32_t groups[3]) {
    uint64_t g = (n + local - 1) / local, gx = vk->caps.max_groups[0];
    if (!g) g = 1;
    groups[0] = (uint32_t)(g < gx ? g : gx);
    groups[1] = (uint32_t)((g + groups[0] - 1) / groups[0]);
    groups[2] = 1;
}

kiln_status kiln__vk_dispatch(kiln_vk *vk, const kiln_vk_dispatch *d) {
    if (d->n < 1 || d->n > KILN_VK_MAX_BIND || d->push_size > KILN_VK_MAX_PUSH || d->push_size % 4)
        return kiln__errs(KILN_ERR_ARG, "vulkan: bad dispatch of '%s' (%d bindings, %u push bytes)", d->shader, d->n,
                          d->push_size);
    kiln_vk_pipeline *p = NULL;
    kiln_status s = pipeline(vk, d->shader, d->n, &p);
    if (s || (s = kiln__vk_begin(vk))) return s;
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorPool = vk->desc_pool,
                                      .descriptorSetCount = 1, .pSetLayouts = &vk->set_layout[d->n]};
    VkDescriptorSet set;
    VkResult r = vkAllocateDescriptorSets(vk->dev, &ai, &set);
    if (r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_FRAGMENTED_POOL) { /* the pool is spent: run what is recorded */
        if (vk->capture) s = kiln__vk_record_sets(vk); /* a recording's sets live as long as it */
        else if (!(s = kiln__vk_flush(&vk->base))) s = kiln__vk_begin(vk);
        if (s) return s;
        ai.descriptorPool = vk->desc_pool;
        r = vkAllocateDescriptorSets(vk->dev, &ai, &set);
    }
    if ((s = kiln__vk_check(r, "allocating a descriptor set"))) return s;
    VkDescriptorBufferInfo info[KILN_VK_MAX_BIND];
    VkWriteDescriptorSet w[KILN_VK_MAX_BIND];
    for (int i = 0; i < d->n; i++) {
        const kiln_tensor *t = d->bind[i];
        if (!t || !t->dbuf)
            return kiln__errs(KILN_ERR_STATE, "vulkan: '%s' binding %d has no device storage", d->shader, i);
        VkDeviceSize at = t->doff & ~(vk->bind_align - 1), range = t->dbuf->size - at;
        info[i] = (VkDescriptorBufferInfo){t->dbuf->buf, at, range < vk->caps.max_range ? range : vk->caps.max_range};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set,
                                      .dstBinding = (uint32_t)i, .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &info[i]};
    }
    vkUpdateDescriptorSets(vk->dev, (uint32_t)d->n, w, 0, NULL);
    vkCmdBindPipeline(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
    vkCmdBindDescriptorSets(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vk->layout[d->n], 0, 1, &set, 0, NULL);
    if (d->push_size) vkCmdPushConstants(vk->cmd, vk->layout[d->n], VK_SHADER_STAGE_COMPUTE_BIT, 0, d->push_size, d->push);
    vkCmdDispatch(vk->cmd, d->groups[0] ? d->groups[0] : 1, d->groups[1] ? d->groups[1] : 1, d->groups[2] ? d->groups[2] : 1);
    kiln__vk_barrier(vk);
    return KILN_OK;
}
