/* The spreading walk's hop loop in C: the same steps as `perspective_walk._spread_numpy`, value for value.
 *
 * Built by setuptools during `pip install -e .` (setup.py, an optional extension: without a compiler the walk
 * runs its numpy path). Called once per walk from `perspective_walk._spread_kernel` with the index's arrays as
 * buffers; it writes every reached fact (fact, spread, the node it was reached through, hop, confidence,
 * assertion time, id hash) and the nodes expanded per layer into output buffers, and leaves the per-entity
 * scratch (`visited` stamps aside) as it found it: `received`, `extra` and `visible` zero.
 *
 * Entries are visited in the numpy path's order (the frontier's CSR rows node by node, then the delta tail from
 * the subject end, then from the object end), so the sums that feed the next hop are added in the same order and
 * come out bit for bit equal.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KERNEL_VERSION 1
#define PENDING (-1) /* in `visited` while a hop runs: reached by this hop, expanded at the next */

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
    int32_t *visited;
    double *received;
    int32_t *extra;
    uint8_t *visible;
    int64_t n_visible;
    /* hop 1 exclusions */
    const int64_t *viewpoint_facts;
    int64_t n_viewpoint_facts;
    const int64_t *hub_sources;
    int64_t n_hub_sources;
    const int64_t *blocked; /* sorted */
    int64_t n_blocked;
    /* outputs */
    int64_t *o_fact, *o_via, *o_hop, *o_hash;
    double *o_x, *o_asserted;
    float *o_conf;
    int64_t capacity, n_out;
} Walk;

static int is_blocked(const Walk *w, int64_t node) {
    int64_t lo = 0, hi = w->n_blocked;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (w->blocked[mid] < node) lo = mid + 1; else hi = mid;
    }
    return lo < w->n_blocked && w->blocked[lo] == node;
}

/* the hop-1 rules: the viewpoint's own fact (agent - person served), and a hub viewer's other parties */
static int excluded(const Walk *w, int64_t via, int64_t nbr, int64_t fact) {
    for (int64_t k = 0; k < w->n_viewpoint_facts; k++)
        if (w->viewpoint_facts[k] == fact) return 1;
    if (w->n_blocked) {
        for (int64_t k = 0; k < w->n_hub_sources; k++)
            if (w->hub_sources[k] == via) return is_blocked(w, nbr);
    }
    return 0;
}

static void emit(Walk *w, int64_t fact, double x, int64_t via, int64_t hop, float conf, double asserted,
                 int64_t hash) {
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

static int cmp_int64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* the viewer's own scopes add their current facts' ends to the org fan (`delta` +1 to add, 0 to reset) */
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

#define FOLLOW(u_, v_, lv_, fact_, weight_, conf_, asserted_, hash_, tail_subject_, tail_object_)                  \
    do {                                                                                                          \
        int64_t u = (u_), v = (v_), fact = (fact_);                                                               \
        int32_t lv = (lv_);                                                                                       \
        if (lv == 0 || lv >= w->n_visible || !w->visible[lv]) break;                                              \
        int32_t at = w->visited[v];                                                                               \
        if (at >= stamp && at < layer) break; /* expanded at an earlier hop: reached from there already */       \
        if (hop == 1 && excluded(w, u, v, fact)) break;                                                           \
        double weight = (double)(weight_);                                                                        \
        double x = w->received[u] * weight;                                                                       \
        any = 1;                                                                                                  \
        if (at == layer) { /* both ends in this frontier: one entry, the two spreads summed */                  \
            int64_t via = u;                                                                                      \
            if (v != u && !(hop == 1 && excluded(w, v, u, fact))) {                                               \
                if ((tail_object_) || (!(tail_subject_) && u > v)) break; /* summed at the other end's entry */   \
                double xv = w->received[v] * weight;                                                              \
                if (xv > x || (xv == x && v < u)) via = v;                                                        \
                x = x + xv;                                                                                       \
            }                                                                                                     \
            emit(w, fact, x, via, hop, (conf_), (asserted_), (hash_));                                            \
            break;                                                                                                \
        }                                                                                                         \
        emit(w, fact, x, u, hop, (conf_), (asserted_), (hash_));                                                  \
        if (at < stamp) { /* onward: the node passes activation on at the next hop */                           \
            if (at != PENDING) { w->visited[v] = PENDING; next[n_next++] = v; }                                   \
            w->received[v] += x;                                                                                  \
        }                                                                                                         \
    } while (0)

/* Returns the number of entries written, or -(entries needed) when the output buffers are too small (the
 * scratch is then left clean and the caller retries with a fresh stamp and larger buffers). */
static int64_t run(Walk *w, const int64_t *sources, const double *source_act, int64_t n_sources,
                   const int64_t *hubs, int64_t n_hubs, int32_t stamp, int32_t stop, int64_t depth,
                   double hop_factor, double exp_s, double floor_, double max_weight, int64_t *o_nodes,
                   int64_t nodes_capacity, int64_t *o_layers, int64_t *n_layers_out) {
    int64_t n_tail = w->n_facts - w->csr_facts;
    int64_t *frontier = malloc(sizeof(int64_t) * (size_t)(n_sources > 0 ? n_sources : 1));
    int64_t *next = NULL;
    int64_t nf = n_sources, n_next = 0, n_nodes = 0, n_layers = 0, result = 0;
    if (!frontier) return PY_SSIZE_T_MIN;
    for (int64_t k = 0; k < n_hubs; k++) w->visited[hubs[k]] = stop; /* reached, never expanded */
    for (int64_t k = 0; k < w->n_blocked; k++) w->visited[w->blocked[k]] = stop;
    for (int64_t k = 0; k < n_sources; k++) {
        frontier[k] = sources[k];
        w->received[sources[k]] = source_act[k]; /* the frontier's activation, then its out, in `received` */
        w->visited[sources[k]] = stamp;
        o_nodes[n_nodes++] = sources[k];
    }
    o_layers[n_layers++] = n_sources;
    for (int64_t hop = 1; hop <= depth; hop++) {
        int32_t layer = stamp + (int32_t)hop - 1;
        int64_t m = 0, bound = 2 * n_tail;
        for (int64_t k = 0; k < nf; k++) {
            int64_t u = frontier[k];
            int64_t fan = (int64_t)w->fan_org[u] + w->extra[u];
            double share = exp_s / (double)(fan > 1 ? fan : 1);
            if (share > 1.0) share = 1.0;
            double out = w->received[u] * share * hop_factor;
            if (hop > 1 && !((max_weight == 1.0 ? out : out * max_weight) >= floor_)) {
                w->received[u] = 0.0;
                w->visited[u] = stop; /* reached, not expanded */
                continue;
            }
            w->received[u] = out;
            frontier[m++] = u;
            if (u < w->n_csr) bound += w->indptr[u + 1] - w->indptr[u];
        }
        nf = m;
        if (nf == 0) break;
        if (w->n_out + bound > w->capacity) {
            result = -(w->n_out + bound);
            goto done;
        }
        free(next);
        next = malloc(sizeof(int64_t) * (size_t)(bound > 0 ? bound : 1));
        if (!next) { result = PY_SSIZE_T_MIN; goto done; }
        n_next = 0;
        int any = 0;
        for (int64_t k = 0; k < nf; k++) {
            int64_t u0 = frontier[k];
            if (u0 >= w->n_csr) continue;
            for (int64_t e = w->indptr[u0]; e < w->indptr[u0 + 1]; e++) {
                const int32_t *f4 = w->fact4 + 4 * e;
                FOLLOW(u0, w->reach[2 * e], w->reach[2 * e + 1], f4[0], as_f32(f4[1]), as_f32(f4[2]),
                       as_f64(w->rank2[2 * e]), w->rank2[2 * e + 1], 0, 0);
            }
        }
        for (int64_t f = w->csr_facts; f < w->n_facts; f++) { /* the delta tail, from the subject end */
            int32_t s = w->src[f];
            if (w->visited[s] != layer) continue;
            FOLLOW(s, w->dst[f], w->live[f], f, w->rel_weight[w->rel[f]], w->conf[f], w->asserted[f], w->hashes[f],
                   1, 0);
        }
        for (int64_t f = w->csr_facts; f < w->n_facts; f++) { /* ... and from the object end (a self-loop once) */
            int32_t s = w->src[f], d = w->dst[f];
            if (s == d || w->visited[d] != layer) continue;
            FOLLOW(d, s, w->live[f], f, w->rel_weight[w->rel[f]], w->conf[f], w->asserted[f], w->hashes[f], 0, 1);
        }
        for (int64_t k = 0; k < nf; k++) w->received[frontier[k]] = 0.0;
        if (!any || hop == depth || n_next == 0) {
            for (int64_t k = 0; k < n_next; k++) { w->received[next[k]] = 0.0; w->visited[next[k]] = 0; }
            nf = 0;
            break;
        }
        qsort(next, (size_t)n_next, sizeof(int64_t), cmp_int64);
        if (n_nodes + n_next > nodes_capacity) { result = PY_SSIZE_T_MIN; nf = 0; goto done; }
        free(frontier);
        frontier = next;
        next = NULL;
        nf = n_next;
        for (int64_t k = 0; k < nf; k++) {
            w->visited[frontier[k]] = stamp + (int32_t)hop;
            o_nodes[n_nodes++] = frontier[k];
        }
        o_layers[n_layers++] = nf;
    }
    result = w->n_out;
done:
    /* what is left in `received`: the frontier's activations, the nodes reached by an unfinished hop */
    for (int64_t k = 0; k < nf; k++) w->received[frontier[k]] = 0.0;
    if (result < 0 && next) {
        for (int64_t k = 0; k < n_next; k++) { w->received[next[k]] = 0.0; w->visited[next[k]] = 0; }
    }
    free(frontier);
    free(next);
    *n_layers_out = n_layers;
    return result;
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
    A_FAN_ORG, A_VISITED, A_RECEIVED, A_EXTRA, A_VISIBLE, A_CODES, A_SCOPE_INDPTR, A_SCOPE_ENDS, A_SCOPE_FACTS,
    A_VIEWPOINT, A_HUB_SOURCES, A_BLOCKED, A_HUBS, A_SOURCES, A_SOURCE_ACT, A_O_FACT, A_O_X, A_O_VIA, A_O_HOP,
    A_O_CONF, A_O_ASSERTED, A_O_HASH, A_O_NODES, A_O_LAYERS, N_ARRAYS
};

static const struct {
    const char *name;
    Py_ssize_t itemsize;
    int writable;
} SPEC[N_ARRAYS] = {
    {"indptr", 8, 0}, {"adj_reach", 8, 0}, {"adj_fact", 16, 0}, {"adj_rank", 16, 0}, {"src", 4, 0},
    {"dst", 4, 0}, {"live", 4, 0}, {"rel", 2, 0}, {"rel_weight", 4, 0}, {"conf", 4, 0}, {"asserted", 8, 0},
    {"hashes", 8, 0}, {"fan_org", 4, 0}, {"visited", 4, 1}, {"received", 8, 1}, {"extra", 4, 1},
    {"visible", 1, 1}, {"codes", 4, 0}, {"scope_indptr", 8, 0}, {"scope_ends", 4, 0}, {"scope_end_facts", 4, 0},
    {"viewpoint_facts", 8, 0}, {"hub_sources", 8, 0}, {"blocked", 8, 0}, {"hubs", 8, 0}, {"sources", 8, 0},
    {"source_act", 8, 0}, {"o_fact", 8, 1}, {"o_x", 8, 1}, {"o_via", 8, 1}, {"o_hop", 8, 1}, {"o_conf", 4, 1},
    {"o_asserted", 8, 1}, {"o_hash", 8, 1}, {"o_nodes", 8, 1}, {"o_layers", 8, 1},
};

#define BAD(message) do { PyErr_SetString(PyExc_ValueError, message); goto fail; } while (0)

static int in_range(const int64_t *values, int64_t n, int64_t limit) {
    for (int64_t k = 0; k < n; k++)
        if (values[k] < 0 || values[k] >= limit) return 0;
    return 1;
}

static PyObject *spread(PyObject *self, PyObject *args) {
    (void)self;
    Buf b[N_ARRAYS];
    memset(b, 0, sizeof(b));
    long long csr_facts, stamp, stop, depth;
    double hop_factor, exp_s, floor_, max_weight;
    PyObject *objects[N_ARRAYS];
    PyObject *result = NULL;
    if (PyTuple_GET_SIZE(args) != N_ARRAYS + 8) {
        PyErr_Format(PyExc_TypeError, "spread takes %d arguments", N_ARRAYS + 8);
        return NULL;
    }
    for (int k = 0; k < N_ARRAYS; k++) objects[k] = PyTuple_GET_ITEM(args, k);
    PyObject *scalars = PyTuple_GetSlice(args, N_ARRAYS, N_ARRAYS + 8);
    if (!scalars) return NULL;
    int parsed = PyArg_ParseTuple(scalars, "LLLLdddd", &csr_facts, &stamp, &stop, &depth, &hop_factor, &exp_s,
                                  &floor_, &max_weight);
    Py_DECREF(scalars);
    if (!parsed) return NULL;
    for (int k = 0; k < N_ARRAYS; k++)
        if (get(objects[k], &b[k], SPEC[k].itemsize, SPEC[k].writable, SPEC[k].name) < 0) goto fail;

    Walk w;
    memset(&w, 0, sizeof(w));
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
    w.n_rel = N(b[A_RELW], 4);
    w.conf = b[A_CONF].view.buf;
    w.asserted = b[A_ASSERTED].view.buf;
    w.hashes = b[A_HASHES].view.buf;
    w.csr_facts = csr_facts;
    w.n_facts = N(b[A_SRC], 4);
    w.fan_org = b[A_FAN_ORG].view.buf;
    w.n_entities = N(b[A_FAN_ORG], 4);
    w.visited = b[A_VISITED].view.buf;
    w.received = b[A_RECEIVED].view.buf;
    w.extra = b[A_EXTRA].view.buf;
    w.visible = b[A_VISIBLE].view.buf;
    w.n_visible = N(b[A_VISIBLE], 1);
    w.viewpoint_facts = b[A_VIEWPOINT].view.buf;
    w.n_viewpoint_facts = N(b[A_VIEWPOINT], 8);
    w.hub_sources = b[A_HUB_SOURCES].view.buf;
    w.n_hub_sources = N(b[A_HUB_SOURCES], 8);
    w.blocked = b[A_BLOCKED].view.buf;
    w.n_blocked = N(b[A_BLOCKED], 8);
    w.o_fact = b[A_O_FACT].view.buf;
    w.o_x = b[A_O_X].view.buf;
    w.o_via = b[A_O_VIA].view.buf;
    w.o_hop = b[A_O_HOP].view.buf;
    w.o_conf = b[A_O_CONF].view.buf;
    w.o_asserted = b[A_O_ASSERTED].view.buf;
    w.o_hash = b[A_O_HASH].view.buf;
    w.capacity = N(b[A_O_FACT], 8);
    const int32_t *codes = b[A_CODES].view.buf;
    int64_t n_codes = N(b[A_CODES], 4);
    const int64_t *scope_indptr = b[A_SCOPE_INDPTR].view.buf;
    int64_t n_scope_rows = N(b[A_SCOPE_INDPTR], 8) - 1;
    const int64_t *sources = b[A_SOURCES].view.buf;
    int64_t n_sources = N(b[A_SOURCES], 8);

    /* the shapes the loops rely on (cheap: no per-entry checks in the loops) */
    if (w.n_csr < 0 || n_scope_rows < 0) BAD("indptr is empty");
    if (w.n_csr > w.n_entities || N(b[A_REACH], 8) < w.indptr[w.n_csr] || N(b[A_FACT], 16) < w.indptr[w.n_csr]
        || N(b[A_RANK], 16) < w.indptr[w.n_csr])
        BAD("the CSR does not match its rows");
    if (N(b[A_DST], 4) != w.n_facts || N(b[A_LIVE], 4) != w.n_facts || N(b[A_REL], 2) != w.n_facts
        || N(b[A_CONF], 4) != w.n_facts || N(b[A_ASSERTED], 8) != w.n_facts || N(b[A_HASHES], 8) != w.n_facts
        || csr_facts < 0 || csr_facts > w.n_facts)
        BAD("the fact columns differ in length");
    if (N(b[A_VISITED], 4) < w.n_entities || N(b[A_RECEIVED], 8) < w.n_entities || N(b[A_EXTRA], 4) < w.n_entities)
        BAD("the scratch is smaller than the entities");
    if (N(b[A_O_X], 8) != w.capacity || N(b[A_O_VIA], 8) != w.capacity || N(b[A_O_HOP], 8) != w.capacity
        || N(b[A_O_CONF], 4) != w.capacity || N(b[A_O_ASSERTED], 8) != w.capacity
        || N(b[A_O_HASH], 8) != w.capacity)
        BAD("the output buffers differ in length");
    if (N(b[A_SOURCE_ACT], 8) != n_sources || N(b[A_O_LAYERS], 8) < depth + 1 || N(b[A_O_NODES], 8) < n_sources)
        BAD("sources or layer buffers");
    if (!in_range(sources, n_sources, w.n_entities) || !in_range(w.blocked, w.n_blocked, w.n_entities)
        || !in_range(b[A_HUBS].view.buf, N(b[A_HUBS], 8), w.n_entities))
        BAD("a node id out of range");
    if (stamp <= 0 || stop <= stamp + depth || stop > INT32_MAX || depth < 0) BAD("stamps");
    if (n_scope_rows > 0 && N(b[A_SCOPE_ENDS], 4) < scope_indptr[n_scope_rows]) BAD("scope ends");
    if (N(b[A_O_NODES], 8) < w.n_entities) BAD("the node buffer is smaller than the entities");
    for (int64_t f = csr_facts; f < w.n_facts; f++)
        if (w.src[f] < 0 || w.src[f] >= w.n_entities || w.dst[f] < 0 || w.dst[f] >= w.n_entities || w.rel[f] < 0
            || w.rel[f] >= w.n_rel)
            BAD("a delta fact out of range");

    int64_t n_layers = 0, n_out;
    Py_BEGIN_ALLOW_THREADS
    set_visible(&w, codes, n_codes, 1);
    extra_fan(&w, codes, n_codes, scope_indptr, n_scope_rows, b[A_SCOPE_ENDS].view.buf,
              b[A_SCOPE_FACTS].view.buf, 1);
    n_out = run(&w, sources, b[A_SOURCE_ACT].view.buf, n_sources, b[A_HUBS].view.buf, N(b[A_HUBS], 8),
                (int32_t)stamp, (int32_t)stop, depth, hop_factor, exp_s, floor_, max_weight, b[A_O_NODES].view.buf,
                N(b[A_O_NODES], 8), b[A_O_LAYERS].view.buf, &n_layers);
    extra_fan(&w, codes, n_codes, scope_indptr, n_scope_rows, b[A_SCOPE_ENDS].view.buf,
              b[A_SCOPE_FACTS].view.buf, 0);
    set_visible(&w, codes, n_codes, 0);
    Py_END_ALLOW_THREADS
    if (n_out == PY_SSIZE_T_MIN) {
        PyErr_NoMemory();
        goto fail;
    }
    result = Py_BuildValue("LL", (long long)n_out, (long long)n_layers);
fail:
    for (int k = 0; k < N_ARRAYS; k++)
        if (b[k].held) PyBuffer_Release(&b[k].view);
    return result;
}

static PyMethodDef METHODS[] = {
    {"spread", spread, METH_VARARGS, "The walk's hop loop (see perspective_walk._spread_kernel)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_walk_kernel", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__walk_kernel(void) {
    PyObject *module = PyModule_Create(&MODULE);
    if (module && PyModule_AddIntConstant(module, "VERSION", KERNEL_VERSION) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
