/* vk_profile.c — $KILN_PROFILE=1 on Vulkan: device time per step from
 * timestamp queries. A timestamp is written before and after each step the
 * executor marks (ex->profile), at the bottom of the pipe: the barrier after
 * every dispatch serializes the work, so the first says when everything
 * before the step finished and the second when the step did. The queries
 * are read after the submit's fence, never with a wait of their own; a
 * full pool is the only extra submit (every PROF_PAIRS steps). A graph's
 * recording (vk_graph.c) writes its steps' timestamps into a pool of its
 * own, read after each replay. */
#include "vk_runtime.h"

#define PROF_PAIRS 1024

/* Query pool and pair rows for PROF_PAIRS pairs */
static kiln_status set_new(kiln_vk *vk, kiln_vk_prof_set *set) {
    VkQueryPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                .queryCount = 2 * PROF_PAIRS};
    set->row = kiln__calloc(PROF_PAIRS, sizeof *set->row);
    set->calls = kiln__calloc(PROF_PAIRS, sizeof *set->calls);
    if (!set->row || !set->calls) return kiln__errs(KILN_ERR_OOM, "vulkan: out of memory");
    return kiln__vk_check(vkCreateQueryPool(vk->dev, &ci, NULL, &set->pool), "vkCreateQueryPool");
}

void kiln__vk_profile_init(kiln_vk *vk) {
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(vk->phys, &n, NULL);
    VkQueueFamilyProperties q[16];
    if (n > 16) n = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(vk->phys, &n, q);
    uint32_t bits = vk->queue_family < n ? q[vk->queue_family].timestampValidBits : 0;
    if (!kiln__profiling() || !bits) return; /* a device without timestamps: its table stays empty */
    kiln_vk_prof_set set = {0};
    kiln_status s = set_new(vk, &set);
    vk->prof_pool = set.pool, vk->prof_row = set.row, vk->prof_calls = set.calls;
    if (s) { /* no profile of the device, nothing else lost */
        kiln_clear_error();
        kiln__vk_profile_free(vk);
        return;
    }
    vk->prof_ns = vk->props.limits.timestampPeriod;
    vk->prof_mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
}

void kiln__vk_profile_free(kiln_vk *vk) {
    if (vk->prof_pool) vkDestroyQueryPool(vk->dev, vk->prof_pool, NULL);
    vk->prof_pool = VK_NULL_HANDLE;
    free(vk->prof_row);
    free(vk->prof_calls);
    vk->prof_row = NULL;
    vk->prof_calls = NULL;
}

static void stamp(kiln_vk *vk) {
    vkCmdWriteTimestamp(vk->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, vk->prof_pool, vk->prof_used++);
}

/* A new command buffer: its queries reset, and a step a flush cut in two
 * goes on (no second call). */
void kiln__vk_profile_started(kiln_vk *vk) {
    if (!vk->prof_pool) return;
    vk->prof_used = 0; /* also after a failed submit, whose queries were never read */
    vkCmdResetQueryPool(vk->cmd, vk->prof_pool, 0, 2 * PROF_PAIRS);
    if (vk->prof_reopen) {
        int row = vk->prof_reopen - 1;
        vk->prof_reopen = 0;
        vk->prof_row[0] = row;
        vk->prof_calls[0] = 0;
        vk->prof_open = row + 1;
        stamp(vk);
    }
}

kiln_status kiln__vk_profile_begin(kiln_vk *vk, int row) {
    if (!vk->prof_pool) return KILN_OK;
    kiln_status s;
    if (vk->prof_used + 2 > 2 * PROF_PAIRS && (s = kiln__vk_flush(&vk->base))) return s;
    if ((s = kiln__vk_begin(vk))) return s;
    vk->prof_row[vk->prof_used / 2] = row;
    vk->prof_calls[vk->prof_used / 2] = 1;
    vk->prof_open = row + 1;
    stamp(vk);
    return KILN_OK;
}

void kiln__vk_profile_end(kiln_vk *vk) {
    if (vk->prof_open) stamp(vk); /* open only within the command buffer being recorded */
    vk->prof_open = vk->prof_reopen = 0;
}

/* Before the command buffer ends: a step still open is closed here and
 * begun again in the next buffer. */
void kiln__vk_profile_closing(kiln_vk *vk) {
    if (!vk->prof_open) return;
    stamp(vk);
    vk->prof_reopen = vk->prof_open;
    vk->prof_open = 0;
}

/* After the fence: the n queries' pairs' times to core's table. */
static void collect(kiln_vk *vk, VkQueryPool pool, uint32_t n, const int *row, const long *calls) {
    if (!pool || !n) return;
    uint64_t ts[2 * PROF_PAIRS];
    if (vkGetQueryPoolResults(vk->dev, pool, 0, n, sizeof ts, ts, sizeof *ts,
                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS)
        return;
    for (uint32_t p = 0; p + 1 < n; p += 2)
        kiln__profile_add(&vk->base, row[p / 2], 1e-9 * vk->prof_ns * (double)((ts[p + 1] - ts[p]) & vk->prof_mask),
                          calls[p / 2]);
}

void kiln__vk_profile_collect(kiln_vk *vk) {
    uint32_t n = vk->prof_used;
    vk->prof_used = 0;
    collect(vk, vk->prof_pool, n, vk->prof_row, vk->prof_calls);
}

kiln_status kiln__vk_profile_record_new(kiln_vk *vk, VkCommandBuffer cmd, kiln_vk_prof_set *set) {
    *set = (kiln_vk_prof_set){0};
    if (!vk->prof_pool) return KILN_OK;
    kiln_status s = set_new(vk, set);
    if (!s) vkCmdResetQueryPool(cmd, set->pool, 0, 2 * PROF_PAIRS);
    return s;
}

void kiln__vk_profile_record_swap(kiln_vk *vk, kiln_vk_prof_set *set) {
    if (!set->pool) return; /* not profiling */
    kiln_vk_prof_set mine = {vk->prof_pool, vk->prof_used, vk->prof_row, vk->prof_calls};
    vk->prof_pool = set->pool, vk->prof_used = set->used, vk->prof_row = set->row, vk->prof_calls = set->calls;
    *set = mine;
}

void kiln__vk_profile_record_collect(kiln_vk *vk, const kiln_vk_prof_set *set) {
    collect(vk, set->pool, set->used, set->row, set->calls);
}

void kiln__vk_profile_record_free(kiln_vk *vk, kiln_vk_prof_set *set) {
    if (set->pool) vkDestroyQueryPool(vk->dev, set->pool, NULL);
    free(set->row);
    free(set->calls);
    *set = (kiln_vk_prof_set){0};
}
