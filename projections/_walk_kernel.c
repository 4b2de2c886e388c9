/* The spreading walk in C: the same steps as `perspective_walk._spread` (numpy), then the ranking and the tiers
 * of `perspective_walk._ranked`, in one call per walk.
 *
 * Built by setuptools during `pip install -e .` (declared in pyproject.toml, an optional extension: without a
 * compiler the walk runs its numpy path). Called from `perspective_walk._spread_kernel` with the index's arrays as buffers; returns
 * the ranked facts (fact, activation, spread, base level, hop, the node it was reached through, tier) and the
 * nodes expanded per layer as new bytearrays, and leaves the per-entity scratch as it found it: `marks`,
 * `received`, `extra` and `visible` zero.
 *
 * Entries are visited in the numpy path's order (the frontier's CSR rows node by node, then the delta tail from
 * the subject end, then from the object end), so the sums that feed the next hop are added in the same order:
 * spreads, hops and reaching nodes come out bit for bit equal; base levels and activations within a last-digit
 * rounding of numpy's vectorized pow and log (so facts whose activations differ in the last digit only may be
 * ranked the other way round).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define KERNEL_VERSION 4
#define PREFETCH 12 /* entries ahead: the neighbour's mark is a random read */
/* `marks`, a byte per entity (100 kB for 100k entities, where the numpy path's int32 stamps take 400 kB: fewer
 * cache lines for the walk's random reads): 0 not reached; h + 1 reached at hop h (the sources: 1), expanded at
 * hop h + 1; PENDING reached by the hop running; STOP reached, never expanded (hubs, blocked parties, nodes
 * below the floor). Cleared after each walk (the nodes it marked are listed). */
#define PENDING 254
#define STOP 255
#define MAX_DEPTH 200

typedef struct {
    /* the CSR adjacency: rows 0..n_csr-1 */
    const int64_t *indptr;
    int64_t n_csr;
    const int32_t *reach; /* 2 per entry: neighbour, live */
    const int32_t *fact4; /* 4 per entry: fact, weight (float32), confidence (float32), unused */
    const int64_t *rank2; /* 2 per entry: assertion time (float64 bits), id hash */
    /* the fact columns; facts csr_facts..n_facts-1 are the delta tail */
    const int32_t *src, *dst, *live;
    const int16_t *rel;
    const float *rel_weight;
    int64_t n_rel;
    const float *conf;
    const double *asserted;
    const int64_t *hashes;
    int64_t csr_facts, n_facts;
    /* entities and the scratch */
    const int32_t *fan_org;
    int64_t n_entities;
    uint8_t *marks;
    double *received;
    int32_t *extra;
    uint8_t *visible;
    int64_t n_visible;
    /* hop 1 exclusions */
    int64_t agent, serving; /* -1: none */
    const int64_t *hub_sources;
    int64_t n_hub_sources;
    const int64_t *blocked; /* sorted */
    int64_t n_blocked;
    /* the entries reached (grown as needed), and the nodes expanded per layer */
    int64_t *o_fact, *o_via, *o_hop, *o_hash;
    double *o_x, *o_asserted;
    float *o_conf;
    int64_t capacity, n_out;
    int64_t *nodes, n_nodes, *layers, n_layers;
    int out_of_memory;
} Walk;

static int grow(void **array, size_t item, int64_t n) {
    void *grown = realloc(*array, item * (size_t)n);
    if (!grown) return -1;
    *array = grown;
    return 0;
}

/* room for `more` entries */
static int reserve(Walk *w, int64_t more) {
    if (w->n_out + more <= w->capacity) return 0;
    int64_t n = w->n_out + more;
    if (n < 2 * w->capacity) n = 2 * w->capacity;
    if (n < 256) n = 256;
    if (grow((void **)&w->o_fact, 8, n) || grow((void **)&w->o_via, 8, n) || grow((void **)&w->o_hop, 8, n)
        || grow((void **)&w->o_hash, 8, n) || grow((void **)&w->o_x, 8, n) || grow((void **)&w->o_asserted, 8, n)
        || grow((void **)&w->o_conf, 4, n))
        return -1;
    w->capacity = n;
    return 0;
}

static void release(Walk *w) {
    free(w->o_fact); free(w->o_via); free(w->o_hop); free(w->o_hash); free(w->o_x); free(w->o_asserted);
    free(w->o_conf); free(w->nodes); free(w->layers);
}

static int is_blocked(const Walk *w, int64_t node) {
    int64_t lo = 0, hi = w->n_blocked;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (w->blocked[mid] < node) lo = mid + 1; else hi = mid;
    }
    return lo < w->n_blocked && w->blocked[lo] == node;
}

/* the hop-1 rules: the viewpoint's own facts (joining the agent and the person served), and a hub viewer's other
 * parties */
static int excluded(const Walk *w, int64_t via, int64_t nbr) {
    if (w->agent >= 0 && w->serving >= 0
        && ((via == w->agent && nbr == w->serving) || (via == w->serving && nbr == w->agent)))
        return 1;
    if (w->n_blocked) {
        for (int64_t k = 0; k < w->n_hub_sources; k++)
            if (w->hub_sources[k] == via) return is_blocked(w, nbr);
    }
    return 0;
}

static void emit(Walk *w, int64_t fact, double x, int64_t via, int64_t hop, float conf, double asserted,
                 int64_t hash) {
    if (w->n_out == w->capacity && reserve(w, 1)) {
        w->out_of_memory = 1;
        return;
    }
    int64_t k = w->n_out++;
    w->o_fact[k] = fact;
    w->o_x[k] = x;
    w->o_via[k] = via;
    w->o_hop[k] = hop;
    w->o_conf[k] = conf;
    w->o_asserted[k] = asserted;
    w->o_hash[k] = hash;
}

static inline float as_f32(int32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof(value));
    return value;
}

static inline double as_f64(int64_t bits) {
    double value;
    memcpy(&value, &bits, sizeof(value));
    return value;
}

/* Sorts `keys` ascending, stably, carrying `values` along (NULL: none); `bytes`: how many low bytes of the keys
 * can differ. An LSD radix sort (a byte per pass, passes where every key has the same byte skipped), insertion
 * for a few keys. Returns -1 when out of memory. */
static int radix_sort(uint64_t *keys, int64_t *values, int64_t n, int bytes) {
    if (n < 48) {
        for (int64_t i = 1; i < n; i++) {
            uint64_t key = keys[i];
            int64_t value = values ? values[i] : 0, j = i;
            for (; j > 0 && keys[j - 1] > key; j--) {
                keys[j] = keys[j - 1];
                if (values) values[j] = values[j - 1];
            }
            keys[j] = key;
            if (values) values[j] = value;
        }
        return 0;
    }
    static const int64_t ZERO[256] = {0};
    int64_t counts[8][256];
    for (int b = 0; b < bytes; b++) memcpy(counts[b], ZERO, sizeof(ZERO));
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < bytes; b++) counts[b][(keys[i] >> (8 * b)) & 255]++;
    uint64_t *key_tmp = malloc(sizeof(uint64_t) * (size_t)n);
    int64_t *value_tmp = values ? malloc(sizeof(int64_t) * (size_t)n) : NULL;
    if (!key_tmp || (values && !value_tmp)) { free(key_tmp); free(value_tmp); return -1; }
    uint64_t *k_from = keys, *k_to = key_tmp;
    int64_t *v_from = values, *v_to = value_tmp;
    for (int b = 0; b < bytes; b++) {
        int64_t *count = counts[b];
        if (count[(keys[0] >> (8 * b)) & 255] == n) continue; /* every key has this byte */
        int64_t at = 0;
        for (int d = 0; d < 256; d++) { int64_t c = count[d]; count[d] = at; at += c; }
        for (int64_t i = 0; i < n; i++) {
            int64_t to = count[(k_from[i] >> (8 * b)) & 255]++;
            k_to[to] = k_from[i];
            if (values) v_to[to] = v_from[i];
        }
        uint64_t *k_swap = k_from; k_from = k_to; k_to = k_swap;
        int64_t *v_swap = v_from; v_from = v_to; v_to = v_swap;
    }
    if (k_from != keys) {
        memcpy(keys, k_from, sizeof(uint64_t) * (size_t)n);
        if (values) memcpy(values, v_from, sizeof(int64_t) * (size_t)n);
    }
    free(key_tmp);
    free(value_tmp);
    return 0;
}

/* the viewer's own scopes add their current facts' ends to the org fan (`add`: 1 to add, 0 to reset) */
static void extra_fan(Walk *w, const int32_t *codes, int64_t n_codes, const int64_t *scope_indptr,
                      int64_t n_scope_rows, const int32_t *scope_ends, const int32_t *scope_end_facts, int add) {
    for (int64_t c = 0; c < n_codes; c++) {
        int64_t code = codes[c];
        if (code < 0 || code >= n_scope_rows) continue;
        for (int64_t j = scope_indptr[code]; j < scope_indptr[code + 1]; j++) {
            if (w->live[scope_end_facts[j]] != 0) {
                if (add) w->extra[scope_ends[j]] += 1; else w->extra[scope_ends[j]] = 0;
            }
        }
    }
    if (n_codes) {
        for (int64_t f = w->csr_facts; f < w->n_facts; f++) {
            int32_t lv = w->live[f];
            if (lv > 1 && lv < w->n_visible && w->visible[lv]) {
                int32_t s = w->src[f], d = w->dst[f];
                if (add) w->extra[s] += 1; else w->extra[s] = 0;
                if (d != s) { if (add) w->extra[d] += 1; else w->extra[d] = 0; }
            }
        }
    }
}

static void set_visible(Walk *w, const int32_t *codes, int64_t n_codes, uint8_t value) {
    if (w->n_visible > 1) w->visible[1] = value; /* org */
    for (int64_t c = 0; c < n_codes; c++)
        if (codes[c] >= 0 && codes[c] + 1 < w->n_visible) w->visible[codes[c] + 1] = value;
}

#define FOLLOW(u_, v_, lv_, fact_, weight_, conf_, asserted_, hash_, tail_subject_, tail_object_)                     \
    do {                                                                                                              \
        int64_t u = (u_), v = (v_), fact = (fact_);                                                                   \
        int32_t lv = (lv_);                                                                                           \
        if (lv == 0 || lv >= w->n_visible || !w->visible[lv]) break;                                                  \
        int at = w->marks[v];                                                                                         \
        if (at != 0 && at < layer) break; /* expanded at an earlier hop: reached from there already */                \
        if (hop == 1 && excluded(w, u, v)) break;                                                                     \
        double weight = (double)(weight_);                                                                            \
        double x = w->received[u] * weight;                                                                           \
        any = 1;                                                                                                      \
        if (at == layer) { /* both ends in this frontier: one entry, the two spreads summed */                        \
            int64_t via = u;                                                                                          \
            if (v != u && !(hop == 1 && excluded(w, v, u))) {                                                         \
                if ((tail_object_) || (!(tail_subject_) && u > v)) break; /* summed at the other end's entry */       \
                double xv = w->received[v] * weight;                                                                  \
                if (xv > x || (xv == x && v < u)) via = v;                                                            \
                x = x + xv;                                                                                           \
            }                                                                                                         \
            emit(w, fact, x, via, hop, (conf_), (asserted_), (hash_));                                                \
            break;                                                                                                    \
        }                                                                                                             \
        emit(w, fact, x, u, hop, (conf_), (asserted_), (hash_));                                                      \
        if ((at == 0 || at == PENDING) && hop < depth) { /* onward: passes activation on at the next hop */           \
            if (at == 0) { w->marks[v] = PENDING; next[n_next++] = v; }                                               \
            w->received[v] += x;                                                                                      \
        }                                                                                                             \
    } while (0)

/* The walk: fills the entries and the layers. Returns 0, or -1 when out of memory (the scratch is left clean). */
static int run(Walk *w, const int64_t *sources, const double *source_act, int64_t n_sources, const int64_t *hubs,
               int64_t n_hubs, int64_t depth, double hop_factor, double exp_s,
               double floor_, double max_weight) {
    int64_t n_tail = w->n_facts - w->csr_facts;
    int id_bytes = 1;
    while (id_bytes < 8 && (w->n_entities >> (8 * id_bytes)) > 0) id_bytes++;
    int64_t *frontier = malloc(sizeof(int64_t) * (size_t)(n_sources > 0 ? n_sources : 1));
    int64_t *next = NULL;
    int64_t nf = n_sources, n_next = 0;
    int result = 0;
    w->nodes = malloc(sizeof(int64_t) * (size_t)(n_sources > 0 ? n_sources : 1));
    w->layers = malloc(sizeof(int64_t) * (size_t)(depth + 1));
    if (!frontier || !w->nodes || !w->layers) { free(frontier); return -1; }
    for (int64_t k = 0; k < n_hubs; k++) w->marks[hubs[k]] = STOP; /* reached, never expanded */
    for (int64_t k = 0; k < w->n_blocked; k++) w->marks[w->blocked[k]] = STOP;
    for (int64_t k = 0; k < n_sources; k++) {
        frontier[k] = sources[k];
        w->received[sources[k]] = source_act[k]; /* the frontier's activation, then its out, in `received` */
        w->marks[sources[k]] = 1;
        w->nodes[w->n_nodes++] = sources[k];
    }
    w->layers[w->n_layers++] = n_sources;
    for (int64_t hop = 1; hop <= depth; hop++) {
        int layer = (int)hop; /* the mark of this hop's frontier */
        int64_t m = 0, bound = 2 * n_tail;
        for (int64_t k = 0; k < nf; k++) {
            int64_t u = frontier[k];
            int64_t fan = (int64_t)w->fan_org[u] + w->extra[u];
            double share = exp_s / (double)(fan > 1 ? fan : 1);
            if (share > 1.0) share = 1.0;
            double out = w->received[u] * share * hop_factor;
            if (hop > 1 && !((max_weight == 1.0 ? out : out * max_weight) >= floor_)) {
                w->received[u] = 0.0;
                w->marks[u] = STOP; /* reached, not expanded */
                continue;
            }
            w->received[u] = out;
            frontier[m++] = u;
            if (u < w->n_csr) bound += w->indptr[u + 1] - w->indptr[u];
        }
        nf = m;
        if (nf == 0) break;
        free(next);
        n_next = 0;
        if (bound > w->n_entities) bound = w->n_entities; /* nodes reached for the first time: each once */
        next = hop < depth ? malloc(sizeof(int64_t) * (size_t)(bound > 0 ? bound : 1)) : NULL;
        if (hop < depth && !next) { result = -1; goto done; }
        int any = 0;
        for (int64_t k = 0; k < nf; k++) {
            int64_t u0 = frontier[k];
            if (u0 >= w->n_csr) continue;
            int64_t row_end = w->indptr[u0 + 1];
            for (int64_t e = w->indptr[u0]; e < row_end; e++) {
                const int32_t *f4 = w->fact4 + 4 * e;
#if defined(__GNUC__)
                if (e + PREFETCH < row_end) __builtin_prefetch(&w->marks[w->reach[2 * (e + PREFETCH)]]);
#endif
                FOLLOW(u0, w->reach[2 * e], w->reach[2 * e + 1], f4[0], as_f32(f4[1]), as_f32(f4[2]),
                       as_f64(w->rank2[2 * e]), w->rank2[2 * e + 1], 0, 0);
            }
        }
        for (int64_t f = w->csr_facts; f < w->n_facts; f++) { /* the delta tail, from the subject end */
            int32_t s = w->src[f];
            if (w->marks[s] != layer) continue;
            FOLLOW(s, w->dst[f], w->live[f], f, w->rel_weight[w->rel[f]], w->conf[f], w->asserted[f], w->hashes[f],
                   1, 0);
        }
        for (int64_t f = w->csr_facts; f < w->n_facts; f++) { /* ... and from the object end (a self-loop once) */
            int32_t s = w->src[f], d = w->dst[f];
            if (s == d || w->marks[d] != layer) continue;
            FOLLOW(d, s, w->live[f], f, w->rel_weight[w->rel[f]], w->conf[f], w->asserted[f], w->hashes[f], 0, 1);
        }
        for (int64_t k = 0; k < nf; k++) w->received[frontier[k]] = 0.0;
        if (w->out_of_memory) { nf = 0; result = -1; goto done; }
        if (!any || hop == depth || n_next == 0) {
            for (int64_t k = 0; k < n_next; k++) { w->received[next[k]] = 0.0; w->marks[next[k]] = 0; }
            nf = 0;
            break;
        }
        if (radix_sort((uint64_t *)next, NULL, n_next, id_bytes)) { result = -1; goto done; } /* ids >= 0 */
        if (grow((void **)&w->nodes, 8, w->n_nodes + n_next)) { nf = 0; result = -1; goto done; }
        free(frontier);
        frontier = next;
        next = NULL;
        nf = n_next;
        for (int64_t k = 0; k < nf; k++) {
            w->marks[frontier[k]] = (uint8_t)(hop + 1);
            w->nodes[w->n_nodes++] = frontier[k];
        }
        w->layers[w->n_layers++] = nf;
    }
done:
    /* what is left in `received`: the frontier's activations, the nodes reached by an unfinished hop */
    for (int64_t k = 0; k < nf; k++) w->received[frontier[k]] = 0.0;
    if (result < 0 && next) {
        for (int64_t k = 0; k < n_next; k++) { w->received[next[k]] = 0.0; w->marks[next[k]] = 0; }
    }
    for (int64_t k = 0; k < n_hubs; k++) w->marks[hubs[k]] = 0;
    for (int64_t k = 0; k < w->n_blocked; k++) w->marks[w->blocked[k]] = 0;
    for (int64_t k = 0; k < w->n_nodes; k++) w->marks[w->nodes[k]] = 0; /* the sources and every layer */
    free(frontier);
    free(next);
    return result;
}


/* ------------------------------------------------------------------------------------------ ranking and tiers */

typedef struct {
    double now, min_age, unit, decay, strength, threshold;
    int64_t full_capacity, gist_capacity, markers_per_neighbour, marker_capacity;
    const int64_t *used_facts; /* this agent's uses, sorted by (fact, time) */
    const double *used_at;
    int64_t n_uses;
} Ranking;

static double decayed(const Ranking *r, double age) { /* one use's term of B: 0 for a use after `now` */
    if (!(age >= 0)) return 0.0;
    double t = (age > r->min_age ? age : r->min_age) / r->unit;
    return r->decay == 0.5 ? 1.0 / sqrt(t) : pow(t, -r->decay); /* d = 0.5 (ACT-R's): t^-0.5 without pow */
}

/* a key whose ascending order is the descending order of the activation (-0.0 as 0.0) */
static uint64_t descending(double value) {
    if (value == 0.0) value = 0.0;
    uint64_t bits;
    memcpy(&bits, &value, sizeof(bits));
    bits = (bits >> 63) ? ~bits : bits | (UINT64_C(1) << 63); /* ascending */
    return ~bits;
}

/* The order of highest activation first; equal activations by id hash, then by entry. A radix sort on the
 * keys' upper 32 bits (the activation to ~6 digits), then the runs that share them (few, short) by insertion. */
static int rank_order(int64_t *order, uint64_t *keys, int64_t n, const double *act, const int64_t *hash) {
    for (int64_t k = 0; k < n; k++) { order[k] = k; keys[k] = descending(act[k]) >> 32; }
    if (radix_sort(keys, order, n, 4)) return -1;
    for (int64_t lo = 0; lo < n;) {
        int64_t hi = lo + 1;
        while (hi < n && keys[hi] == keys[lo]) hi++;
        if (hi - lo > 32) { /* a long run (many equal activations): by hash, then by the keys' lower bits */
            int64_t m = hi - lo;
            uint64_t *run = malloc(sizeof(uint64_t) * (size_t)m);
            if (!run) return -1;
            for (int64_t i = 0; i < m; i++) run[i] = (uint64_t)hash[order[lo + i]] ^ (UINT64_C(1) << 63);
            int failed = radix_sort(run, order + lo, m, 8);
            for (int64_t i = 0; i < m; i++) run[i] = descending(act[order[lo + i]]) & UINT64_C(0xffffffff);
            failed = failed || radix_sort(run, order + lo, m, 4);
            free(run);
            if (failed) return -1;
            lo = hi;
            continue;
        }
        for (int64_t i = lo + 1; i < hi; i++) { /* stable: moves an entry only past ones that rank lower */
            int64_t e = order[i], j = i;
            uint64_t key = descending(act[e]);
            for (; j > lo; j--) {
                int64_t d = order[j - 1];
                uint64_t other = descending(act[d]);
                if (other < key || (other == key && hash[d] <= hash[e])) break;
                order[j] = d;
            }
            order[j] = e;
        }
        lo = hi;
    }
    return 0;
}

/* B, A = B + ln(c) + S + ln(x), the order, and the tiers (`perspective_walk._ranked`, `tier_codes`), written
 * ranked into the output arrays. `count` is zero per entity and left zero. Returns -1 when out of memory. */
static int rank_entries(const Walk *w, const Ranking *r, int32_t *count, int64_t *facts, double *act_out,
                        double *spread, double *base_out, int64_t *hops, int64_t *via, int8_t *tiers) {
    int64_t n = w->n_out;
    double *base = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *act = malloc(sizeof(double) * (size_t)(n ? n : 1));
    int64_t *order = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    uint64_t *tmp = malloc(sizeof(uint64_t) * (size_t)(n ? n : 1));
    if (!base || !act || !order || !tmp) { free(base); free(act); free(order); free(tmp); return -1; }
    for (int64_t k = 0; k < n; k++) {
        double total = decayed(r, r->now - w->o_asserted[k]);
        if (r->n_uses) {
            int64_t fact = w->o_fact[k], n_left = r->n_uses;
            const int64_t *at = r->used_facts; /* the first use of `fact`, if any (a branchless binary search) */
            while (n_left > 1) {
                int64_t half = n_left / 2;
                at = at[half] < fact ? at + half : at;
                n_left -= half;
            }
            int64_t lo = (at - r->used_facts) + (*at < fact);
            if (lo < r->n_uses && r->used_facts[lo] == fact) {
                double uses = 0.0;
                for (; lo < r->n_uses && r->used_facts[lo] == fact; lo++) uses += decayed(r, r->now - r->used_at[lo]);
                total = total + uses;
            }
        }
        base[k] = log(total);
        act[k] = base[k] + log((double)w->o_conf[k] * w->o_x[k]) + r->strength; /* ln c + ln x in one log */
    }
    if (rank_order(order, tmp, n, act, w->o_hash)) { free(base); free(act); free(order); free(tmp); return -1; }
    int64_t above = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t e = order[k];
        facts[k] = w->o_fact[e];
        act_out[k] = act[e];
        spread[k] = w->o_x[e];
        base_out[k] = base[e];
        hops[k] = w->o_hop[e];
        via[k] = w->o_via[e];
        if (act[e] > r->threshold) above++;
    }
    int64_t full_end = r->full_capacity < above ? r->full_capacity : above;
    int64_t gist_end = r->full_capacity + r->gist_capacity < above ? r->full_capacity + r->gist_capacity : above;
    int64_t markers = 0;
    for (int64_t k = 0; k < n; k++) {
        if (k < full_end) tiers[k] = 0;
        else if (k < gist_end) tiers[k] = 1;
        else if (k < above) { /* markers while room: at most so many per neighbour; the rest counted */
            int32_t *seen = &count[via[k]];
            if (markers < r->marker_capacity && *seen < r->markers_per_neighbour) {
                tiers[k] = 2;
                markers++;
                (*seen)++;
            } else {
                tiers[k] = 3;
            }
        } else tiers[k] = 4;
    }
    for (int64_t k = gist_end; k < above; k++) count[via[k]] = 0;
    free(base); free(act); free(order); free(tmp);
    return 0;
}

/* ------------------------------------------------------------------------------------------ the Python side */

typedef struct {
    Py_buffer view;
    int held;
} Buf;

static int get(PyObject *obj, Buf *b, Py_ssize_t itemsize, int writable, const char *name) {
    if (PyObject_GetBuffer(obj, &b->view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    b->held = 1;
    if (b->view.itemsize != itemsize || b->view.len % itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes", name, itemsize);
        return -1;
    }
    return 0;
}

#define N(b, size) ((int64_t)((b).view.len / (size)))

enum {
    A_INDPTR, A_REACH, A_FACT, A_RANK, A_SRC, A_DST, A_LIVE, A_REL, A_RELW, A_CONF, A_ASSERTED, A_HASHES,
    A_FAN_ORG, A_MARKS, A_RECEIVED, A_EXTRA, A_VISIBLE, A_SCOPE_INDPTR, A_SCOPE_ENDS, A_SCOPE_FACTS, A_BLOCKED,
    A_HUBS, A_USED_FACTS, A_USED_AT, N_ARRAYS
};

static const struct {
    const char *name;
    Py_ssize_t itemsize;
    int writable;
} SPEC[N_ARRAYS] = {
    {"indptr", 8, 0}, {"adj_reach", 8, 0}, {"adj_fact", 16, 0}, {"adj_rank", 16, 0}, {"src", 4, 0},
    {"dst", 4, 0}, {"live", 4, 0}, {"rel", 2, 0}, {"rel_weight", 4, 0}, {"conf", 4, 0}, {"asserted", 8, 0},
    {"hashes", 8, 0}, {"fan_org", 4, 0}, {"marks", 1, 1}, {"received", 8, 1}, {"extra", 4, 1},
    {"visible", 1, 1}, {"scope_indptr", 8, 0}, {"scope_ends", 4, 0}, {"scope_end_facts", 4, 0}, {"blocked", 8, 0},
    {"hubs", 8, 0}, {"used_facts", 8, 0}, {"used_at", 8, 0},
};

enum { S_CODES, S_HUB_SOURCES, S_SOURCES, S_SOURCE_ACT, N_SEQUENCES };
#define N_SCALARS 21
#define BAD(message) do { PyErr_SetString(PyExc_ValueError, message); goto fail; } while (0)

static int in_range(const int64_t *values, int64_t n, int64_t limit) {
    for (int64_t k = 0; k < n; k++)
        if (values[k] < 0 || values[k] >= limit) return 0;
    return 1;
}

/* a short list of ints (or floats: `as_double`) as a new C array */
static int sequence(PyObject *obj, int as_double, void **out, int64_t *n) {
    PyObject *fast = PySequence_Fast(obj, "expected a sequence");
    if (!fast) return -1;
    Py_ssize_t size = PySequence_Fast_GET_SIZE(fast);
    *out = malloc(8 * (size_t)(size ? size : 1));
    if (!*out) { Py_DECREF(fast); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t k = 0; k < size; k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, k);
        if (as_double) ((double *)*out)[k] = PyFloat_AsDouble(item);
        else ((int64_t *)*out)[k] = PyLong_AsLongLong(item);
    }
    Py_DECREF(fast);
    *n = (int64_t)size;
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *new_array(int64_t n, size_t item, char **data) {
    PyObject *array = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)((size_t)n * item));
    if (array) *data = PyByteArray_AS_STRING(array);
    return array;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    Buf b[N_ARRAYS];
    memset(b, 0, sizeof(b));
    void *seq[N_SEQUENCES] = {NULL};
    int64_t seq_n[N_SEQUENCES] = {0};
    long long n_facts, n_entities, n_rel, csr_facts, agent, serving, depth, full_capacity,
        gist_capacity, per_neighbour, marker_capacity;
    double hop_factor, exp_s, floor_, max_weight, now, min_age, unit, decay, strength, threshold;
    PyObject *result = NULL, *outputs[9] = {NULL};
    int32_t *codes_heap = NULL;
    Walk w;
    memset(&w, 0, sizeof(w));
    if (PyTuple_GET_SIZE(args) != N_ARRAYS + N_SEQUENCES + N_SCALARS) {
        PyErr_Format(PyExc_TypeError, "walk takes %d arguments", N_ARRAYS + N_SEQUENCES + N_SCALARS);
        return NULL;
    }
    PyObject *scalars = PyTuple_GetSlice(args, N_ARRAYS + N_SEQUENCES, N_ARRAYS + N_SEQUENCES + N_SCALARS);
    if (!scalars) return NULL;
    int parsed = PyArg_ParseTuple(scalars, "LLLLLLLddddddddddLLLL", &n_facts, &n_entities, &n_rel, &csr_facts,
                                  &agent, &serving, &depth, &hop_factor, &exp_s, &floor_,
                                  &max_weight, &now, &min_age, &unit, &decay, &strength, &threshold, &full_capacity,
                                  &gist_capacity, &per_neighbour, &marker_capacity);
    Py_DECREF(scalars);
    if (!parsed) return NULL;
    for (int k = 0; k < N_ARRAYS; k++)
        if (get(PyTuple_GET_ITEM(args, k), &b[k], SPEC[k].itemsize, SPEC[k].writable, SPEC[k].name) < 0) goto fail;
    for (int k = 0; k < N_SEQUENCES; k++)
        if (sequence(PyTuple_GET_ITEM(args, N_ARRAYS + k), k == S_SOURCE_ACT, &seq[k], &seq_n[k]) < 0) goto fail;

    w.indptr = b[A_INDPTR].view.buf;
    w.n_csr = N(b[A_INDPTR], 8) - 1;
    w.reach = b[A_REACH].view.buf;
    w.fact4 = b[A_FACT].view.buf;
    w.rank2 = b[A_RANK].view.buf;
    w.src = b[A_SRC].view.buf;
    w.dst = b[A_DST].view.buf;
    w.live = b[A_LIVE].view.buf;
    w.rel = b[A_REL].view.buf;
    w.rel_weight = b[A_RELW].view.buf;
    w.n_rel = n_rel;
    w.conf = b[A_CONF].view.buf;
    w.asserted = b[A_ASSERTED].view.buf;
    w.hashes = b[A_HASHES].view.buf;
    w.csr_facts = csr_facts;
    w.n_facts = n_facts;
    w.fan_org = b[A_FAN_ORG].view.buf;
    w.n_entities = n_entities;
    w.marks = b[A_MARKS].view.buf;
    w.received = b[A_RECEIVED].view.buf;
    w.extra = b[A_EXTRA].view.buf;
    w.visible = b[A_VISIBLE].view.buf;
    w.n_visible = N(b[A_VISIBLE], 1);
    w.agent = agent;
    w.serving = serving;
    w.hub_sources = seq[S_HUB_SOURCES];
    w.n_hub_sources = seq_n[S_HUB_SOURCES];
    w.blocked = b[A_BLOCKED].view.buf;
    w.n_blocked = N(b[A_BLOCKED], 8);
    const int32_t *codes32 = NULL;
    int32_t codes_buf[64];
    int64_t n_codes = seq_n[S_CODES];
    if (n_codes > 64 && !(codes_heap = malloc(sizeof(int32_t) * (size_t)n_codes))) { PyErr_NoMemory(); goto fail; }
    int32_t *codes_to = codes_heap ? codes_heap : codes_buf;
    for (int64_t k = 0; k < n_codes; k++) {
        int64_t code = ((int64_t *)seq[S_CODES])[k];
        codes_to[k] = code < 0 || code > INT32_MAX - 1 ? -1 : (int32_t)code;
    }
    codes32 = codes_to;
    const int64_t *scope_indptr = b[A_SCOPE_INDPTR].view.buf;
    int64_t n_scope_rows = N(b[A_SCOPE_INDPTR], 8) - 1;
    const int64_t *sources = seq[S_SOURCES];
    int64_t n_sources = seq_n[S_SOURCES];
    Ranking r = {now, min_age, unit, decay, strength, threshold, full_capacity, gist_capacity, per_neighbour,
                 marker_capacity, b[A_USED_FACTS].view.buf, b[A_USED_AT].view.buf, N(b[A_USED_FACTS], 8)};

    /* the shapes the loops rely on (cheap: no per-entry checks of the CSR in the loops) */
    if (w.n_csr < 0 || n_scope_rows < 0) BAD("indptr is empty");
    if (n_facts < 0 || n_entities < 0 || n_rel < 0 || N(b[A_RELW], 4) < n_rel) BAD("counts");
    if (w.n_csr > n_entities || N(b[A_REACH], 8) < w.indptr[w.n_csr] || N(b[A_FACT], 16) < w.indptr[w.n_csr]
        || N(b[A_RANK], 16) < w.indptr[w.n_csr])
        BAD("the CSR does not match its rows");
    if (N(b[A_SRC], 4) < n_facts || N(b[A_DST], 4) < n_facts || N(b[A_LIVE], 4) < n_facts
        || N(b[A_REL], 2) < n_facts || N(b[A_CONF], 4) < n_facts || N(b[A_ASSERTED], 8) < n_facts
        || N(b[A_HASHES], 8) < n_facts || csr_facts < 0 || csr_facts > n_facts)
        BAD("the fact columns are shorter than the facts");
    if (N(b[A_FAN_ORG], 4) < n_entities || N(b[A_MARKS], 1) < n_entities || N(b[A_RECEIVED], 8) < n_entities
        || N(b[A_EXTRA], 4) < n_entities)
        BAD("the entity columns or the scratch are shorter than the entities");
    if (seq_n[S_SOURCE_ACT] != n_sources || N(b[A_USED_AT], 8) != r.n_uses) BAD("sources or uses");
    if (!in_range(sources, n_sources, n_entities) || !in_range(w.blocked, w.n_blocked, n_entities)
        || !in_range(b[A_HUBS].view.buf, N(b[A_HUBS], 8), n_entities))
        BAD("a node id out of range");
    if (depth < 0 || depth > MAX_DEPTH) BAD("depth");
    if (n_scope_rows > 0 && (N(b[A_SCOPE_ENDS], 4) < scope_indptr[n_scope_rows]
                             || N(b[A_SCOPE_FACTS], 4) < scope_indptr[n_scope_rows]))
        BAD("scope ends");
    for (int64_t f = csr_facts; f < n_facts; f++)
        if (w.src[f] < 0 || w.src[f] >= n_entities || w.dst[f] < 0 || w.dst[f] >= n_entities || w.rel[f] < 0
            || w.rel[f] >= n_rel)
            BAD("a delta fact out of range");

    int failed;
    Py_BEGIN_ALLOW_THREADS
    set_visible(&w, codes32, n_codes, 1);
    extra_fan(&w, codes32, n_codes, scope_indptr, n_scope_rows, b[A_SCOPE_ENDS].view.buf,
              b[A_SCOPE_FACTS].view.buf, 1);
    failed = run(&w, sources, seq[S_SOURCE_ACT], n_sources, b[A_HUBS].view.buf, N(b[A_HUBS], 8),
                 depth, hop_factor, exp_s, floor_, max_weight);
    extra_fan(&w, codes32, n_codes, scope_indptr, n_scope_rows, b[A_SCOPE_ENDS].view.buf,
              b[A_SCOPE_FACTS].view.buf, 0);
    set_visible(&w, codes32, n_codes, 0);
    Py_END_ALLOW_THREADS
    if (failed) { PyErr_NoMemory(); goto fail; }

    char *data[9];
    static const size_t ITEM[8] = {8, 8, 8, 8, 8, 8, 1, 8};
    for (int k = 0; k < 7; k++)
        if (!(outputs[k] = new_array(w.n_out, ITEM[k], &data[k]))) goto fail;
    if (!(outputs[7] = new_array(w.n_nodes, 8, &data[7]))) goto fail;
    if (!(outputs[8] = PyTuple_New((Py_ssize_t)w.n_layers))) goto fail;
    for (int64_t k = 0; k < w.n_layers; k++) {
        PyObject *size = PyLong_FromLongLong((long long)w.layers[k]);
        if (!size) goto fail;
        PyTuple_SET_ITEM(outputs[8], (Py_ssize_t)k, size);
    }
    if (w.n_nodes) memcpy(data[7], w.nodes, sizeof(int64_t) * (size_t)w.n_nodes);
    Py_BEGIN_ALLOW_THREADS
    failed = rank_entries(&w, &r, w.extra, (int64_t *)data[0], (double *)data[1], (double *)data[2],
                          (double *)data[3], (int64_t *)data[4], (int64_t *)data[5], (int8_t *)data[6]);
    Py_END_ALLOW_THREADS
    if (failed) { PyErr_NoMemory(); goto fail; }
    result = PyTuple_New(9);
    if (result)
        for (int k = 0; k < 9; k++) { PyTuple_SET_ITEM(result, k, outputs[k]); outputs[k] = NULL; }
fail:
    free(codes_heap);
    for (int k = 0; k < N_SEQUENCES; k++) free(seq[k]);
    for (int k = 0; k < 9; k++) Py_XDECREF(outputs[k]);
    for (int k = 0; k < N_ARRAYS; k++)
        if (b[k].held) PyBuffer_Release(&b[k].view);
    release(&w);
    return result;
}

static PyMethodDef METHODS[] = {
    {"walk", walk, METH_VARARGS, "The walk, its ranking and tiers (see perspective_walk._spread_kernel)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_walk_kernel", NULL, -1, METHODS, NULL, NULL, NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__walk_kernel(void) {
    PyObject *module = PyModule_Create(&MODULE);
    if (module && PyModule_AddIntConstant(module, "VERSION", KERNEL_VERSION) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
