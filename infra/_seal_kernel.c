/* Sealing a batch's content fields in C: AES-256-GCM records of `infra/mapper.py`'s `_seal_jobs_python` (the
 * sealed format v2), in one call for the batch, byte for byte what the Python path writes (AES-GCM is
 * deterministic for a key, nonce, plaintext and associated data). A group member's key (a fact's) is derived here as
 * `infra/keystore.derive` does, with OpenSSL's BLAKE2BMAC, so it never becomes a Python object. One call per batch
 * rather than per field keeps OpenSSL's code in the CPU's caches: called between the Python of each event, it was
 * evicted every time.
 *
 * Built by setuptools during `pip install -e .` (declared in pyproject.toml, an optional extension linked with
 * OpenSSL 3's libcrypto: without a compiler or the headers the mapper seals in Python). tests/test_seal_kernel.py
 * holds it to the Python path.
 *
 * One module cipher context serves every call (and one MAC context the derivation): the GIL is held throughout
 * (nothing here releases it), so no two calls use them at once. After each call their keys are overwritten with an
 * all-zero key's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#define KERNEL_VERSION 6
#define KEY_BYTES 32
#define NONCE_BYTES 12
#define TAG_BYTES 16
#define STACK_BYTES 512
#define JOINED_BYTES 2048 /* a prefix and a text shorter than this are encrypted in one update */

static EVP_CIPHER *aes_gcm;
static EVP_CIPHER_CTX *cipher_ctx;
static EVP_MAC *blake2b_mac;
static EVP_MAC_CTX *derive_ctx;

static int openssl_error(const char *what) {
    PyErr_Format(PyExc_RuntimeError, "OpenSSL: %s failed", what);
    return -1;
}

static const unsigned char ZERO_KEY[KEY_BYTES];

static int batching; /* set while seal_batch runs: it wipes once, at its end */

/* Overwrite the context's key schedule with an all-zero key's, so the last data key sealed with does not stay in
 * memory after the call (its key may be forgotten meanwhile: crypto-shredding). */
static int wipe(void) {
    if (batching)
        return 0;
    if (!EVP_EncryptInit_ex2(cipher_ctx, NULL, ZERO_KEY, NULL, NULL))
        return openssl_error("EVP_EncryptInit_ex2 (wipe)");
    return 0;
}

/* nonce || ciphertext || tag into `out` (12 + 1 + n + 16 bytes for a prefix, 12 + n + 16 without); the context is
 * keyed with `key` for this call and wiped after it. */
static int encrypt(const char *key, const char *nonce, const char *prefix, const char *plain,
                   Py_ssize_t n, const char *ad, Py_ssize_t ad_n, unsigned char *out) {
    int len;
    if (n > INT_MAX - 64 || ad_n > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too long to seal");
        return -1;
    }
    memcpy(out, nonce, NONCE_BYTES);
    unsigned char *at = out + NONCE_BYTES;
    if (!EVP_EncryptInit_ex2(cipher_ctx, NULL, (const unsigned char *)key, (const unsigned char *)nonce, NULL))
        return openssl_error("EVP_EncryptInit_ex2");
    if (ad_n && !EVP_EncryptUpdate(cipher_ctx, NULL, &len, (const unsigned char *)ad, (int)ad_n))
        return openssl_error("EVP_EncryptUpdate (associated data)");
    if (prefix && n < JOINED_BYTES) { /* one update for the prefix and the text: each call costs hundreds of
                                        * instructions of EVP dispatch, and a 1-byte update leaves GCM a partial block */
        unsigned char joined[JOINED_BYTES];
        joined[0] = (unsigned char)*prefix;
        memcpy(joined + 1, plain, (size_t)n);
        int sealed_ok = EVP_EncryptUpdate(cipher_ctx, at, &len, joined, (int)n + 1);
        OPENSSL_cleanse(joined, (size_t)n + 1); /* (the plaintext: not left on the stack) */
        if (!sealed_ok)
            return openssl_error("EVP_EncryptUpdate");
        at += len;
        prefix = NULL, n = 0;
    }
    if (prefix) {
        if (!EVP_EncryptUpdate(cipher_ctx, at, &len, (const unsigned char *)prefix, 1))
            return openssl_error("EVP_EncryptUpdate");
        at += len;
    }
    if (n) {
        if (!EVP_EncryptUpdate(cipher_ctx, at, &len, (const unsigned char *)plain, (int)n))
            return openssl_error("EVP_EncryptUpdate");
        at += len;
    }
    if (!EVP_EncryptFinal_ex(cipher_ctx, at, &len))
        return openssl_error("EVP_EncryptFinal_ex");
    at += len;
    if (!EVP_CIPHER_CTX_ctrl(cipher_ctx, EVP_CTRL_AEAD_GET_TAG, TAG_BYTES, at))
        return openssl_error("EVP_CTRL_AEAD_GET_TAG");
    return wipe();
}

static int check_bytes(PyObject *arg, const char *name, Py_ssize_t size) {
    if (!PyBytes_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes", name);
        return -1;
    }
    if (size >= 0 && PyBytes_GET_SIZE(arg) != size) {
        PyErr_Format(PyExc_ValueError, "%s must be %zd bytes", name, size);
        return -1;
    }
    return 0;
}

typedef struct {
    const char *at;
    Py_ssize_t n;
} piece;

/* The head's pieces, then (when `framed`) the 4-byte big-endian length of what follows, then nonce || ciphertext
 * || tag. The plaintext is the prefix byte (if any) and `plain`. Encrypted straight into the new bytes object. */
static PyObject *sealed(const char *key, const char *nonce, const char *prefix, const char *plain, Py_ssize_t n,
                        const char *ad, Py_ssize_t ad_n, const piece *head, int pieces, int framed) {
    Py_ssize_t raw_n = NONCE_BYTES + (prefix ? 1 : 0) + n + TAG_BYTES;
    Py_ssize_t size = raw_n + (framed ? 4 : 0);
    for (int i = 0; i < pieces; i++)
        size += head[i].n;
    PyObject *result = PyBytes_FromStringAndSize(NULL, size);
    if (!result)
        return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    for (int i = 0; i < pieces; i++) {
        memcpy(out, head[i].at, head[i].n);
        out += head[i].n;
    }
    if (framed) {
        out[0] = (unsigned char)(raw_n >> 24), out[1] = (unsigned char)(raw_n >> 16);
        out[2] = (unsigned char)(raw_n >> 8), out[3] = (unsigned char)raw_n;
        out += 4;
    }
    if (encrypt(key, nonce, prefix, plain, n, ad, ad_n, out) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

PyDoc_STRVAR(seal_doc, "seal(key, nonce, plain, ad) -> bytes\n\n"
                       "nonce + AES-256-GCM ciphertext + tag (key 32 bytes, nonce 12).");

static PyObject *seal(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "seal(key, nonce, plain, ad)");
        return NULL;
    }
    if (check_bytes(args[0], "key", KEY_BYTES) < 0 || check_bytes(args[1], "nonce", NONCE_BYTES) < 0 ||
        check_bytes(args[2], "plain", -1) < 0 || check_bytes(args[3], "ad", -1) < 0)
        return NULL;
    return sealed(PyBytes_AS_STRING(args[0]), PyBytes_AS_STRING(args[1]), NULL, PyBytes_AS_STRING(args[2]),
                  PyBytes_GET_SIZE(args[2]), PyBytes_AS_STRING(args[3]), PyBytes_GET_SIZE(args[3]), NULL, 0, 0);
}

/* A field's value as the bytes to seal: a str as b"s" + its UTF-8 (`prefix` "s"), bytes as they are. `*encoded`
 * is set to a temporary the caller releases. */
static int field_bytes(PyObject *value, const char **plain, Py_ssize_t *n, const char **prefix, PyObject **encoded) {
    *encoded = NULL;
    if (PyUnicode_Check(value)) {
        /* ASCII: the str's own bytes. Otherwise a temporary UTF-8 copy, as str.encode makes (not
         * PyUnicode_AsUTF8AndSize, which would keep one attached to the str for its lifetime); lone surrogates
         * raise UnicodeEncodeError, as str.encode does. */
        if (PyUnicode_IS_READY(value) && PyUnicode_IS_ASCII(value)) {
            *plain = (const char *)PyUnicode_DATA(value);
            *n = PyUnicode_GET_LENGTH(value);
        } else {
            *encoded = PyUnicode_AsUTF8String(value);
            if (!*encoded)
                return -1;
            *plain = PyBytes_AS_STRING(*encoded);
            *n = PyBytes_GET_SIZE(*encoded);
        }
        *prefix = "s";
        return 0;
    }
    if (PyBytes_Check(value)) {
        *plain = PyBytes_AS_STRING(value);
        *n = PyBytes_GET_SIZE(value);
        *prefix = NULL;
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "value must be str or bytes");
    return -1;
}

/* A data key's field (its bytes from `field_bytes`), once `key` is checked: extras are (ad, head). */
static PyObject *seal_field(const char *key, const char *nonce, const char *prefix, const char *plain, Py_ssize_t n,
                            PyObject *const *extras) {
    if (check_bytes(extras[0], "ad", -1) < 0 || check_bytes(extras[1], "head", -1) < 0)
        return NULL;
    piece head = {PyBytes_AS_STRING(extras[1]), PyBytes_GET_SIZE(extras[1])};
    return sealed(key, nonce, prefix, plain, n, PyBytes_AS_STRING(extras[0]), PyBytes_GET_SIZE(extras[0]), &head, 1,
                  1);
}

/* A group member's field, with its derived key: extras are (group, field head, first). The key's name is group +
 * member (group ends in '/'), the associated data `<name>|<field>` (the field head is its length byte and name), and
 * the record's head the field head, after the sealed part's start and the name when `first`. */
static PyObject *seal_member_field(const char *key, const char *nonce, PyObject *member, const char *prefix,
                                   const char *plain, Py_ssize_t n, PyObject *const *extras) {
    if (check_bytes(extras[0], "group", -1) < 0 || check_bytes(extras[1], "field head", -1) < 0)
        return NULL;
    if (!PyBool_Check(extras[2])) {
        PyErr_SetString(PyExc_TypeError, "first must be a bool");
        return NULL;
    }
    const char *group = PyBytes_AS_STRING(extras[0]), *field_head = PyBytes_AS_STRING(extras[1]);
    Py_ssize_t group_n = PyBytes_GET_SIZE(extras[0]), field_head_n = PyBytes_GET_SIZE(extras[1]);
    Py_ssize_t member_n = PyBytes_GET_SIZE(member), name_n = group_n + member_n;
    if (field_head_n < 1 || (unsigned char)field_head[0] != field_head_n - 1) {
        PyErr_SetString(PyExc_ValueError, "field head must be the field's length byte and name");
        return NULL;
    }
    if (name_n > 0xFFFF) {
        PyErr_SetString(PyExc_ValueError, "a key name longer than 65535 bytes cannot be recorded");
        return NULL;
    }
    Py_ssize_t ad_n = name_n + field_head_n; /* name, '|', field */
    char stack[STACK_BYTES];
    char *ad = ad_n <= STACK_BYTES ? stack : PyMem_Malloc(ad_n);
    if (!ad)
        return PyErr_NoMemory();
    memcpy(ad, group, group_n);
    memcpy(ad + group_n, PyBytes_AS_STRING(member), member_n);
    ad[name_n] = '|';
    memcpy(ad + name_n + 1, field_head + 1, field_head_n - 1);
    char start[4] = {0, 2, (char)(name_n >> 8), (char)name_n}; /* SEALED, then the name's length */
    piece head[4] = {{start, 4}, {group, group_n}, {PyBytes_AS_STRING(member), member_n}, {field_head, field_head_n}};
    int first = extras[2] == Py_True;
    PyObject *result = sealed(key, nonce, prefix, plain, n, ad, ad_n, first ? head : head + 3, first ? 4 : 1, 1);
    if (ad != stack)
        PyMem_Free(ad);
    return result;
}

/* A member's key into `key`: keyed BLAKE2b of member_id under group_key. The MAC context keeps the group key for
 * a re-init, so it is overwritten with an all-zero key afterwards (unless batching: seal_batch does it once). */
static int derive(const char *group_key, const char *member, Py_ssize_t member_n, unsigned char *key) {
    size_t made = 0;
    int derived = EVP_MAC_init(derive_ctx, (const unsigned char *)group_key, KEY_BYTES, NULL) &&
                  EVP_MAC_update(derive_ctx, (const unsigned char *)member, (size_t)member_n) &&
                  EVP_MAC_final(derive_ctx, key, &made, KEY_BYTES) && made == KEY_BYTES;
    int wiped = batching || EVP_MAC_init(derive_ctx, ZERO_KEY, KEY_BYTES, NULL);
    if (!derived)
        return openssl_error("BLAKE2BMAC");
    if (!wiped)
        return openssl_error("EVP_MAC_init (wipe)");
    return 0;
}

PyDoc_STRVAR(seal_batch_doc,
             "seal_batch(nonces, jobs) -> list[bytes]\n\n"
             "Seals each job in the list `jobs`, a tuple (key, member_id, value, extras), as a record: head + the "
             "4-byte big-endian length of what follows + nonce + AES-256-GCM ciphertext + tag; value a str is "
             "sealed as b's' + its UTF-8, bytes as they are. With member_id None, key is the data key and extras "
             "are (ad, head). With member_id bytes, key is its group's key, the member's key is derived as "
             "infra/keystore.derive does (keyed BLAKE2b of member_id, personalised b'noumena-derive', 32 bytes), "
             "and extras are (group, field_head, first): the key's name is group + member_id, the associated data "
             "name + b'|' + the field, and the head field_head (the field's length byte and name), after "
             "b'\\x00\\x02' + the name's 2-byte big-endian length + the name when first. Job i uses "
             "nonces[12 * i:12 * i + 12]. The cipher and MAC contexts are wiped once, at the end (the OpenSSL code "
             "stays hot in the CPU's caches over a batch, rather than being evicted between events by the Python "
             "around it).");

static PyObject *seal_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "seal_batch(nonces, jobs)");
        return NULL;
    }
    if (check_bytes(args[0], "nonces", -1) < 0)
        return NULL;
    if (!PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "jobs must be a list");
        return NULL;
    }
    PyObject *jobs = args[1];
    Py_ssize_t count = PyList_GET_SIZE(jobs);
    if (PyBytes_GET_SIZE(args[0]) < count * NONCE_BYTES) {
        PyErr_SetString(PyExc_ValueError, "nonces must hold 12 bytes for each job");
        return NULL;
    }
    PyObject *results = PyList_New(count);
    if (!results)
        return NULL;
    unsigned char derived[KEY_BYTES];
    batching = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *job = PyList_GET_ITEM(jobs, i);
        if (!PyTuple_Check(job) || PyTuple_GET_SIZE(job) != 4 || !PyTuple_Check(PyTuple_GET_ITEM(job, 3)) ||
            PyTuple_GET_SIZE(PyTuple_GET_ITEM(job, 3)) != (PyTuple_GET_ITEM(job, 1) == Py_None ? 2 : 3)) {
            PyErr_Format(PyExc_TypeError, "job %zd must be a tuple (key, None, value, (ad, head)) or (group key, "
                         "member_id, value, (group, field_head, first))", i);
            goto failed;
        }
        PyObject *const *item = &PyTuple_GET_ITEM(job, 0);
        PyObject *const *extras = &PyTuple_GET_ITEM(item[3], 0);
        if (check_bytes(item[0], "key", KEY_BYTES) < 0)
            goto failed;
        const char *key = PyBytes_AS_STRING(item[0]);
        if (item[1] != Py_None) {
            if (check_bytes(item[1], "member_id", -1) < 0 ||
                derive(key, PyBytes_AS_STRING(item[1]), PyBytes_GET_SIZE(item[1]), derived) < 0)
                goto failed;
            key = (const char *)derived;
        }
        const char *nonce = PyBytes_AS_STRING(args[0]) + i * NONCE_BYTES, *plain, *prefix;
        Py_ssize_t n;
        PyObject *encoded;
        if (field_bytes(item[2], &plain, &n, &prefix, &encoded) < 0)
            goto failed;
        PyObject *one = item[1] == Py_None ? seal_field(key, nonce, prefix, plain, n, extras)
                                           : seal_member_field(key, nonce, item[1], prefix, plain, n, extras);
        Py_XDECREF(encoded);
        if (!one)
            goto failed;
        PyList_SET_ITEM(results, i, one);
    }
    batching = 0;
    OPENSSL_cleanse(derived, KEY_BYTES);
    if (wipe() < 0 || !EVP_MAC_init(derive_ctx, ZERO_KEY, KEY_BYTES, NULL)) {
        Py_DECREF(results);
        return PyErr_Occurred() ? NULL : (openssl_error("EVP_MAC_init (wipe)"), NULL);
    }
    return results;
failed:
    batching = 0;
    OPENSSL_cleanse(derived, KEY_BYTES);
    PyObject *type, *value, *traceback; /* the job's error is the one raised, whatever the wipe says */
    PyErr_Fetch(&type, &value, &traceback);
    wipe();
    EVP_MAC_init(derive_ctx, ZERO_KEY, KEY_BYTES, NULL);
    PyErr_Restore(type, value, traceback);
    Py_DECREF(results);
    return NULL;
}

static PyMethodDef METHODS[] = {
    {"seal", (PyCFunction)(void (*)(void))seal, METH_FASTCALL, seal_doc},
    {"seal_batch", (PyCFunction)(void (*)(void))seal_batch, METH_FASTCALL, seal_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_seal_kernel", NULL, -1, METHODS, NULL, NULL, NULL,
                                    NULL};

/* The member key derivation's MAC context: BLAKE2b, personalised and sized once; keyed with zeros between calls. */
static int derive_setup(void) {
    size_t size = KEY_BYTES;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_CUSTOM, (void *)"noumena-derive", 14),
        OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size),
        OSSL_PARAM_construct_end(),
    };
    blake2b_mac = EVP_MAC_fetch(NULL, "BLAKE2BMAC", NULL);
    derive_ctx = blake2b_mac ? EVP_MAC_CTX_new(blake2b_mac) : NULL;
    return derive_ctx && EVP_MAC_init(derive_ctx, ZERO_KEY, KEY_BYTES, params);
}

PyMODINIT_FUNC PyInit__seal_kernel(void) {
    if (!aes_gcm) {
        aes_gcm = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
        cipher_ctx = EVP_CIPHER_CTX_new();
        if (!aes_gcm || !cipher_ctx || !EVP_EncryptInit_ex2(cipher_ctx, aes_gcm, NULL, NULL, NULL) ||
            !derive_setup()) {
            EVP_MAC_CTX_free(derive_ctx);
            EVP_MAC_free(blake2b_mac);
            EVP_CIPHER_CTX_free(cipher_ctx);
            EVP_CIPHER_free(aes_gcm);
            cipher_ctx = NULL, aes_gcm = NULL, derive_ctx = NULL, blake2b_mac = NULL;
            PyErr_SetString(PyExc_ImportError, "OpenSSL has no AES-256-GCM or no BLAKE2BMAC");
            return NULL;
        }
    }
    PyObject *module = PyModule_Create(&MODULE);
    if (module && PyModule_AddIntConstant(module, "VERSION", KERNEL_VERSION) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
