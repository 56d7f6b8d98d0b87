/* pool.c: the threads of a pass: every thread first takes its share of the decoding (A's rows,
 * and B's panels in a segmented pass), then work items (panel, row chunk) until none is left.
 * The thread count changes only the speed, never the bits. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "driver.h"

/* A thread's buffers for k ranges of up to klen (its panel: all of K only; K in segments decodes
 * the pass's panels once, job->panels), allocated by the thread that first takes the set (so
 * from its own malloc arena, where a freed panel stays for the next GEMM's thread: allocated by
 * the caller instead, glibc gave the panels back to the system on free and every call touched
 * fresh pages); 0 when memory runs out. */
static int buffers_make(mm_cpu_buffers* b, const mm_cpu_job* job) {
    if (b->scratch) return 1;
    b->scratch = mm_cpu_alloc_lines(sizeof(float) * (size_t)(34 * job->kern->mr * job->kern->w));
    if (b->scratch && (job->state || mm_cpu_panel_alloc(&b->panel, job->klen, job->kern->w, job->signs))) return 1;
    free(b->scratch);
    b->scratch = NULL;
    return 0;
}

void mm_cpu_buffers_free(mm_cpu_job* job) {
    for (int t = 0; t < job->nbufs; t++) {
        if (!job->bufs[t].scratch) continue;
        free(job->bufs[t].panel.rec);
        free(job->bufs[t].scratch);
    }
    free(job->bufs);
}

/* A thread's share of what the pass decodes first (job->decode): groups of A's rows, then (K in
 * segments) B's panels, until none is left; then it waits until every unit is done (the items
 * read all of them). A panel's decoder adds its columns' NaN/Inf flags to col_special. */
static void decode_share(mm_cpu_job* job) {
    mm_cpu_decode_work* d = &job->decode;
    const int w = job->kern->w;
    const int64_t groups = (d->rows + d->per_item - 1) / d->per_item;
    const int64_t units = groups + (d->panels ? job->panels : 0);
    for (;;) {
        const int64_t i = atomic_fetch_add(&d->next, 1);
        if (i >= units) break;
        if (i < groups) {
            const int64_t i0 = i * d->per_item, i1 = i0 + d->per_item < d->rows ? i0 + d->per_item : d->rows;
            mm_cpu_decode_a(d->g, d->lut, i0, i1, d->k0, d->k1, d->out, d->row_special);
        } else {
            const int64_t p = i - groups;
            uint8_t found[64];
            mm_cpu_decode_b_panel(job->g, &job->lut_b, (job->panel0 + p) * w, w, job->kern->byte_order,
                                  job->plan.sign_paired, d->k0, d->k1, &d->panels[p], found);
            for (int c = 0; c < w; c++) job->col_special[p * w + c] |= found[c];
        }
        atomic_fetch_add(&d->done, 1);
    }
    while (atomic_load(&d->done) < units) sched_yield();
}

static void* worker(void* arg) {
    mm_cpu_job* job = (mm_cpu_job*)arg;
    fesetenv(&job->fenv);
    decode_share(job);
    const mm_gemm* g = job->g;
    const int mr = job->kern->mr, w = job->kern->w, n = mr * w;
    const int64_t klen = job->ke - job->ks, as = mm_cpu_a_stride(klen);
    mm_cpu_buffers* buf = &job->bufs[atomic_fetch_add(&job->next_buf, 1)]; /* mm_cpu_run_pass: one per thread */
    if (!buffers_make(buf, job)) return NULL; /* the other threads take this one's share */
    const mm_cpu_panel panel = buf->panel; /* all of K only */
    float* scratch = buf->scratch;
    uint8_t col_special[64];
    float *acc = scratch, *part = scratch + n, *red = scratch + 2 * n;
    const int64_t items = job->panels * job->chunks;
    int64_t have_panel = -1;
    for (;;) {
        const int64_t item = atomic_fetch_add(&job->next_item, 1);
        if (item >= items) break;
        /* K in segments: a row chunk's items in turn, one per panel (its A rows stay in L2);
         * all of K: a panel's items in turn, one per row chunk (the thread's panel is kept) */
        const int64_t p = job->state ? item % job->panels : item / job->chunks;
        const int64_t ci = job->state ? item / job->panels : item % job->chunks;
        const int64_t j0 = (job->panel0 + p) * w;
        const mm_cpu_panel* pn = job->state ? &job->panel_set[p] : &panel;
        if (!job->state && p != have_panel) {
            mm_cpu_decode_b_panel(g, &job->lut_b, j0, w, job->kern->byte_order, job->plan.sign_paired,
                                  job->ks, job->ke, &panel, col_special);
            have_panel = p;
        }
        const int64_t r0 = ci * job->chunk_rows;
        const int64_t r1 = r0 + job->chunk_rows < job->rows ? r0 + job->chunk_rows : job->rows;
        for (int64_t rt = r0; rt < r1; rt += mr) {
            const int rows = (int)(r1 - rt < mr ? r1 - rt : mr);
            const int64_t left = g->M - (job->row0 + rt); /* rows of A from rt on */
            const mm_cpu_operands o = {job->a + rt * as, as, rows, left < rows ? (int)left : rows, pn->rec, pn->sign};
            if (job->state) {
                mm_cpu_tile_segment(job, rt, p, &o, acc, part, job->col_special + p * w);
                continue;
            }
            mm_cpu_prefetch_out(job, rt, rows, j0);
            if (mm_is_blockwise(g)) {
                for (int i = 0; i < n; i++) acc[i] = 0.0f;
                mm_cpu_tile_blockwise(job, &o, rt, j0, 0, 0, g->K, acc, part, red);
            } else {
                mm_cpu_tile_dot(job, &o, acc, part, red);
            }
            mm_cpu_store_tile(job, rt, rows, j0, acc, col_special);
        }
    }
    atomic_fetch_add(&job->finished, 1);
    return NULL;
}

/* Runs the job's items on up to `threads` threads (the caller is one of them; at most
 * MM_CPU_MAX_THREADS, gemm.c). */
static void run_threads(mm_cpu_job* job, int threads) {
    pthread_t tid[MM_CPU_MAX_THREADS];
    int started = 0;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[started], NULL, worker, job) == 0) started++;
    worker(job); /* fewer threads than asked only changes the speed, never the bits */
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
}

void mm_cpu_decode_set(mm_cpu_job* job, const mm_gemm* sub, const mm_cpu_lut* lut, int32_t* a,
                       uint8_t* row_special, int64_t rows, int64_t k0, int64_t k1) {
    mm_cpu_decode_work* d = &job->decode;
    d->panels = job->panel_set;
    d->g = sub;
    d->lut = lut;
    d->out = a;
    d->row_special = row_special;
    d->rows = rows;
    d->k0 = k0;
    d->k1 = k1;
}

int mm_cpu_run_pass(mm_cpu_job* job, int threads) {
    const int mr = job->kern->mr, step = job->kern->row_step;
    int64_t chunks, unit;
    if (job->state && job->panels >= threads) {
        /* K in segments: chunks of seg_rows (whole tiles), each item one panel of its chunk */
        chunks = (job->rows + job->seg_rows - 1) / job->seg_rows;
        unit = mr;
    } else if (job->panels >= threads) {
        /* Enough items for dynamic balancing (4 per thread), but whole panels when possible:
         * each item decodes its panel unless the thread's previous item had the same one. */
        chunks = (4 * (int64_t)threads + job->panels - 1) / job->panels;
        if (chunks > job->rows / mr) chunks = job->rows / mr;
        unit = mr;
    } else {
        /* Fewer panels than threads (small N): each panel's rows cut into as many chunks of
         * whole groups as give every thread an item (each decodes the panel again). */
        chunks = (threads + job->panels - 1) / job->panels;
        if (chunks > job->rows / step) chunks = job->rows / step;
        unit = step;
    }
    if (chunks < 1) chunks = 1;
    job->chunk_rows = ((job->rows + chunks - 1) / chunks + unit - 1) / unit * unit;
    job->chunks = (job->rows + job->chunk_rows - 1) / job->chunk_rows;
    atomic_store(&job->next_item, 0);
    atomic_store(&job->next_buf, 0);
    atomic_store(&job->finished, 0);
    const int64_t items = job->panels * job->chunks;
    if (threads > items) threads = (int)items;
    if (threads > job->nbufs) threads = job->nbufs;
    mm_cpu_decode_work* d = &job->decode;
    d->per_item = (d->rows + 4 * threads - 1) / (4 * threads); /* 4 groups of rows per thread */
    atomic_store(&d->next, 0);
    atomic_store(&d->done, 0);
    run_threads(job, threads);
    return atomic_load(&job->finished) == 0 ? MM_ERR_NO_MEMORY : MM_OK;
}
