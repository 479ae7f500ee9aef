/* vk_graph.c — graph replay on Vulkan (core/graph_replay.c): a kiln
 * graph's dispatches recorded once into a command buffer of their own and
 * submitted again on later computes of the same key, after the command
 * buffer of that compute's uploads, in one vkQueueSubmit (vk_dispatch.c's
 * flush). While recording, the backend's command buffer, descriptor pool,
 * staging and scratch are the recording's: what its dispatches bind and
 * what its recorded copies read (a chain's program, a code map) live as
 * long as it does, and none is reset at a flush. Push constants are baked
 * in; core's key holds everything they are made of (shapes, parameters,
 * offsets); what changes with every run lives in device memory instead
 * (dropout's run number: kiln__vk_run_word). Anything that would submit
 * while recording (an upload that outgrows the staging buffer) breaks the
 * recording: it comes back NULL and the graph runs node by node. Under
 * $KILN_PROFILE the recording stamps its steps into a query pool of its
 * own, read after each replay's fence (vk_profile.c). */
#include "vk_runtime.h"

struct kiln_record {
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkDescriptorPool *sets; /* n_sets pools, the last one in use while recording */
    int n_sets;
    kiln_devbuf *staging, *scratch;
    kiln_devbuf **held; /* staging and scratch outgrown while recording */
    int n_held;
    kiln_vk_prof_set prof; /* $KILN_PROFILE: its steps' timestamps (the backend's while recording) */
    /* the backend's own while recording */
    VkCommandBuffer o_cmd;
    bool o_recording;
    VkDescriptorPool o_sets;
    kiln_devbuf *o_staging, *o_scratch;
    VkDeviceSize o_staging_used, o_scratch_used;
};

static void record_destroy(kiln_vk *vk, kiln_record *r) {
    if (r->pool) vkDestroyCommandPool(vk->dev, r->pool, NULL);
    for (int i = 0; i < r->n_sets; i++) vkDestroyDescriptorPool(vk->dev, r->sets[i], NULL);
    for (int i = 0; i < r->n_held; i++) kiln__vk_buffer_free(vk, r->held[i]);
    kiln__vk_buffer_free(vk, r->staging);
    kiln__vk_buffer_free(vk, r->scratch);
    kiln__vk_profile_record_free(vk, &r->prof);
    free(r->sets);
    free(r->held);
    free(r);
}

kiln_status kiln__vk_record_sets(kiln_vk *vk) {
    kiln_record *r = vk->capture;
    VkDescriptorPool *more = realloc(r->sets, (size_t)(r->n_sets + 1) * sizeof *more);
    if (!more) return kiln__errs(KILN_ERR_OOM, "vulkan: out of memory");
    r->sets = more;
    kiln_status s = kiln__vk_desc_pool(vk, &r->sets[r->n_sets]);
    if (!s) vk->desc_pool = r->sets[r->n_sets++];
    return s;
}

kiln_status kiln__vk_record_hold(kiln_vk *vk, kiln_devbuf *d) {
    kiln_record *r = vk->capture;
    if (!d) return KILN_OK;
    kiln_devbuf **more = realloc(r->held, (size_t)(r->n_held + 1) * sizeof *more);
    if (!more) {
        kiln__vk_buffer_free(vk, d); /* the recording breaks: nothing it recorded runs */
        vk->capture_broken = true;
        return kiln__errs(KILN_ERR_OOM, "vulkan: out of memory");
    }
    r->held = more;
    r->held[r->n_held++] = d;
    return KILN_OK;
}

kiln_status kiln__vk_record_begin(kiln_backend *b) {
    kiln_vk *vk = (kiln_vk *)b;
    kiln_record *r = kiln__calloc(1, sizeof *r);
    if (!r) return kiln__errs(KILN_ERR_OOM, "vulkan: out of memory");
    VkCommandPoolCreateInfo cp = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = vk->queue_family};
    kiln_status s = kiln__vk_check(vkCreateCommandPool(vk->dev, &cp, NULL, &r->pool), "command pool");
    VkCommandBufferAllocateInfo ca = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = r->pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    if (!s) s = kiln__vk_check(vkAllocateCommandBuffers(vk->dev, &ca, &r->cmd), "command buffer");
    /* submitted once per replay, never twice at once */
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if (!s) s = kiln__vk_check(vkBeginCommandBuffer(r->cmd, &bi), "vkBeginCommandBuffer");
    if (!s) s = kiln__vk_profile_record_new(vk, r->cmd, &r->prof);
    if (s) {
        record_destroy(vk, r);
        return s;
    }
    r->o_cmd = vk->cmd, r->o_recording = vk->recording, r->o_sets = vk->desc_pool;
    r->o_staging = vk->staging, r->o_staging_used = vk->staging_used;
    r->o_scratch = vk->scratch, r->o_scratch_used = vk->scratch_used;
    vk->capture = r;
    vk->capture_broken = false;
    if ((s = kiln__vk_record_sets(vk))) {
        vk->capture = NULL;
        record_destroy(vk, r);
        return s;
    }
    vk->cmd = r->cmd;
    vk->recording = true;
    vk->staging = vk->scratch = NULL;
    kiln__vk_profile_record_swap(vk, &r->prof);
    vk->staging_used = vk->scratch_used = 0;
    kiln__vk_barrier(vk); /* after the work submitted before it (this compute's uploads) */
    return KILN_OK;
}

kiln_record *kiln__vk_record_end(kiln_backend *b) {
    kiln_vk *vk = (kiln_vk *)b;
    kiln_record *r = vk->capture;
    kiln__vk_barrier_host(vk);
    kiln__vk_profile_record_swap(vk, &r->prof);
    kiln_status s = kiln__vk_check(vkEndCommandBuffer(r->cmd), "vkEndCommandBuffer");
    r->staging = vk->staging, r->scratch = vk->scratch;
    vk->cmd = r->o_cmd, vk->recording = r->o_recording, vk->desc_pool = r->o_sets;
    vk->staging = r->o_staging, vk->staging_used = r->o_staging_used;
    vk->scratch = r->o_scratch, vk->scratch_used = r->o_scratch_used;
    vk->capture = NULL;
    if (!s && vk->capture_broken) s = kiln__errs(KILN_ERR_UNSUPPORTED, "vulkan: the recording had to submit");
    if (s) {
        record_destroy(vk, r);
        return NULL;
    }
    return r;
}

uint64_t kiln__vk_buffer_id(const kiln_devbuf *d) { return d->serial; }

VkCommandBuffer kiln__vk_record_cmd(const kiln_record *r) { return r->cmd; }

void kiln__vk_record_ran(kiln_vk *vk, const kiln_record *r) { kiln__vk_profile_record_collect(vk, &r->prof); }

kiln_status kiln__vk_replay(kiln_backend *b, kiln_record *r) {
    kiln_vk *vk = (kiln_vk *)b;
    kiln_status s = vk->pending ? kiln__vk_flush(b) : KILN_OK;
    if (!s) vk->pending = r; /* submitted by the next flush, after the uploads recorded before it */
    return s;
}

void kiln__vk_record_free(kiln_backend *b, kiln_record *r) {
    kiln_vk *vk = (kiln_vk *)b;
    if (vk->pending == r) kiln__vk_flush(b);
    record_destroy(vk, r);
}

/* A flush while recording breaks the recording (vk_dispatch.c), and
 * core's key covers every push constant: every dispatch may be recorded. */
bool kiln__vk_recordable(kiln_backend *b, const kiln_tensor *node) {
    (void)b, (void)node;
    return true;
}
