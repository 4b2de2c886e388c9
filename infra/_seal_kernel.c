/* Sealing a content field in C: AES-256-GCM and the base64url text of `infra/mapper.py`'s `_Sealer.seal`, in
 * one call, byte for byte what the Python path writes (AES-GCM is deterministic for a key, nonce, plaintext and
 * associated data). (A member key's derivation stays in Python, `infra/keystore.derive`: hashlib's BLAKE2b
 * costs about 0.5 µs a fact, an EVP_MAC "BLAKE2BMAC" call here 0.3 µs, too little to move.)
 *
 * Built by setuptools during `pip install -e .` (declared in pyproject.toml, an optional extension linked with
 * OpenSSL 3's libcrypto: without a compiler or the headers the mapper seals in Python). tests/test_seal_kernel.py
 * holds it to the Python path.
 *
 * One cipher context serves every call: the GIL is held throughout (nothing here releases it), so no two calls
 * use it at once. After each call its key schedule is overwritten with an all-zero key's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>
#include <openssl/evp.h>

#define KERNEL_VERSION 2
#define KEY_BYTES 32
#define NONCE_BYTES 12
#define TAG_BYTES 16
#define STACK_BYTES 2048

static EVP_CIPHER *aes_gcm;
static EVP_CIPHER_CTX *cipher_ctx;

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* base64url of n bytes without padding: the number of characters */
static Py_ssize_t b64_length(Py_ssize_t n) { return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0); }

static char *b64(const unsigned char *in, Py_ssize_t n, char *out) {
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
        *out++ = ALPHABET[v >> 18];
        *out++ = ALPHABET[v >> 12 & 63];
        *out++ = ALPHABET[v >> 6 & 63];
        *out++ = ALPHABET[v & 63];
    }
    if (n - i == 1) {
        unsigned v = (unsigned)in[i] << 16;
        *out++ = ALPHABET[v >> 18];
        *out++ = ALPHABET[v >> 12 & 63];
    } else if (n - i == 2) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8;
        *out++ = ALPHABET[v >> 18];
        *out++ = ALPHABET[v >> 12 & 63];
        *out++ = ALPHABET[v >> 6 & 63];
    }
    return out;
}

static int openssl_error(const char *what) {
    PyErr_Format(PyExc_RuntimeError, "OpenSSL: %s failed", what);
    return -1;
}

static const unsigned char ZERO_KEY[KEY_BYTES];

/* Overwrite the context's key schedule with an all-zero key's, so the last data key sealed with does not stay in
 * memory after the call (its key may be forgotten meanwhile: crypto-shredding). */
static int wipe(void) {
    if (!EVP_EncryptInit_ex2(cipher_ctx, NULL, ZERO_KEY, NULL, NULL))
        return openssl_error("EVP_EncryptInit_ex2 (wipe)");
    return 0;
}

/* nonce || ciphertext || tag into `out` (12 + 1 + n + 16 bytes for a prefix, 12 + n + 16 without) */
static int encrypt(const char *key, const char *nonce, const char *prefix, const char *plain, Py_ssize_t n,
                   const char *ad, Py_ssize_t ad_n, unsigned char *out) {
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

/* The sealed text: head, base64url(nonce), ':', base64url(ciphertext + tag), suffix. The plaintext is the
 * prefix byte (if any) and `plain`. */
static PyObject *sealed(PyObject *key, PyObject *nonce, const char *prefix, const char *plain, Py_ssize_t n,
                        PyObject *ad, const char *head, Py_ssize_t head_n, const char *suffix, Py_ssize_t suffix_n,
                        int split) {
    Py_ssize_t raw_n = NONCE_BYTES + (prefix ? 1 : 0) + n + TAG_BYTES;
    unsigned char stack[STACK_BYTES];
    unsigned char *raw = raw_n <= STACK_BYTES ? stack : PyMem_Malloc(raw_n);
    if (!raw)
        return PyErr_NoMemory();
    PyObject *result = NULL;
    if (encrypt(PyBytes_AS_STRING(key), PyBytes_AS_STRING(nonce), prefix, plain, n, PyBytes_AS_STRING(ad),
                PyBytes_GET_SIZE(ad), raw) < 0)
        goto done;
    Py_ssize_t chars = b64_length(raw_n);
    result = PyBytes_FromStringAndSize(NULL, head_n + chars + (split ? 1 : 0) + suffix_n);
    if (!result)
        goto done;
    char *out = PyBytes_AS_STRING(result);
    memcpy(out, head, head_n);
    out += head_n;
    if (split) {
        out = b64(raw, NONCE_BYTES, out);
        *out++ = ':';
        out = b64(raw + NONCE_BYTES, raw_n - NONCE_BYTES, out);
    } else {
        out = b64(raw, raw_n, out);
    }
    memcpy(out, suffix, suffix_n);
done:
    if (raw != stack)
        PyMem_Free(raw);
    return result;
}

PyDoc_STRVAR(seal_doc, "seal(key, nonce, plain, ad) -> bytes\n\n"
                       "base64url without padding of nonce + AES-256-GCM ciphertext + tag (key 32 bytes, nonce 12).");

static PyObject *seal(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "seal(key, nonce, plain, ad)");
        return NULL;
    }
    if (check_bytes(args[0], "key", KEY_BYTES) < 0 || check_bytes(args[1], "nonce", NONCE_BYTES) < 0 ||
        check_bytes(args[2], "plain", -1) < 0 || check_bytes(args[3], "ad", -1) < 0)
        return NULL;
    return sealed(args[0], args[1], NULL, PyBytes_AS_STRING(args[2]), PyBytes_GET_SIZE(args[2]), args[3], "", 0,
                  "", 0, 0);
}

PyDoc_STRVAR(seal_field_doc,
             "seal_field(key, nonce, value, ad, head, suffix) -> bytes\n\n"
             "head + base64url(nonce) + b':' + base64url(ciphertext + tag) + suffix, no padding: value a str is "
             "sealed as b's' + its UTF-8, bytes as they are.");

static PyObject *seal_field(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "seal_field(key, nonce, value, ad, head, suffix)");
        return NULL;
    }
    if (check_bytes(args[0], "key", KEY_BYTES) < 0 || check_bytes(args[1], "nonce", NONCE_BYTES) < 0 ||
        check_bytes(args[3], "ad", -1) < 0 || check_bytes(args[4], "head", -1) < 0 ||
        check_bytes(args[5], "suffix", -1) < 0)
        return NULL;
    PyObject *value = args[2], *encoded = NULL, *result;
    const char *plain, *prefix;
    Py_ssize_t n;
    if (PyUnicode_Check(value)) {
        /* ASCII: the str's own bytes. Otherwise a temporary UTF-8 copy, as str.encode makes (not
         * PyUnicode_AsUTF8AndSize, which would keep one attached to the str for its lifetime); lone surrogates
         * raise UnicodeEncodeError, as str.encode does. */
        if (PyUnicode_IS_READY(value) && PyUnicode_IS_ASCII(value)) {
            plain = (const char *)PyUnicode_DATA(value);
            n = PyUnicode_GET_LENGTH(value);
        } else {
            encoded = PyUnicode_AsUTF8String(value);
            if (!encoded)
                return NULL;
            plain = PyBytes_AS_STRING(encoded);
            n = PyBytes_GET_SIZE(encoded);
        }
        prefix = "s";
    } else if (PyBytes_Check(value)) {
        plain = PyBytes_AS_STRING(value);
        n = PyBytes_GET_SIZE(value);
        prefix = NULL;
    } else {
        PyErr_SetString(PyExc_TypeError, "value must be str or bytes");
        return NULL;
    }
    result = sealed(args[0], args[1], prefix, plain, n, args[3], PyBytes_AS_STRING(args[4]),
                    PyBytes_GET_SIZE(args[4]), PyBytes_AS_STRING(args[5]), PyBytes_GET_SIZE(args[5]), 1);
    Py_XDECREF(encoded);
    return result;
}

static PyMethodDef METHODS[] = {
    {"seal", (PyCFunction)(void (*)(void))seal, METH_FASTCALL, seal_doc},
    {"seal_field", (PyCFunction)(void (*)(void))seal_field, METH_FASTCALL, seal_field_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_seal_kernel", NULL, -1, METHODS, NULL, NULL, NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__seal_kernel(void) {
    if (!aes_gcm) {
        aes_gcm = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
        cipher_ctx = EVP_CIPHER_CTX_new();
        if (!aes_gcm || !cipher_ctx ||
            !EVP_EncryptInit_ex2(cipher_ctx, aes_gcm, NULL, NULL, NULL)) {
            EVP_CIPHER_CTX_free(cipher_ctx);
            EVP_CIPHER_free(aes_gcm);
            cipher_ctx = NULL, aes_gcm = NULL;
            PyErr_SetString(PyExc_ImportError, "OpenSSL has no AES-256-GCM");
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
