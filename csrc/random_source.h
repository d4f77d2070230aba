/* Where the jittered strategies draw their random numbers from.
 *
 * "python" (the default) draws from the random module's global generator,
 * exactly as redis-py does: random.uniform(a, b) and random.random(), looked
 * up on the module at every draw so that random.seed() and monkeypatching
 * take effect.  While random.uniform is the unpatched one (Random.uniform
 * bound to the module's hidden instance, random._inst), its formula
 * a + (b - a) * self.random() is computed here to save a Python-level
 * call, with the instance's own random(), as the unpatched uniform does.
 * "Unpatched" is decided from the instance, never from what the module held
 * when this extension was first imported: a test may have mocked
 * random.random or random.uniform at that moment.
 *
 * "fast" is a xoshiro256** generator in C, seeded explicitly or from
 * os.urandom, for users who do not need the random module's stream.
 */
#ifndef RBC_RANDOM_SOURCE_H
#define RBC_RANDOM_SOURCE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "state.h"

int rbc_random_init(rbc_state *st, PyObject *module);
int rbc_random_traverse(rbc_random_state *rs, visitproc visit, void *arg);
void rbc_random_clear(rbc_random_state *rs);

/* ---- xoshiro256** (Blackman and Vigna), inline for the fast path ---- */

static inline uint64_t
rbc_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* A double in [0, 1) from the top 53 bits, as random.random() makes one. */
static inline double
rbc_xoshiro_double(uint64_t s[4])
{
    uint64_t result = rbc_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rbc_rotl(s[3], 45);
    return (double)(result >> 11) * 0x1.0p-53;
}

int rbc_random_uniform_python(rbc_random_state *rs, double a, double b, double *out);
int rbc_random_random_python(rbc_random_state *rs, double *out, PyObject **result);

/* uniform(a, b) from the fast generator: random.uniform's formula,
 * operation for operation. */
static inline double
rbc_random_uniform_fast(rbc_random_state *rs, double a, double b)
{
    return a + (b - a) * rbc_xoshiro_double(rs->xoshiro);
}

/* uniform(a, b) as doubles.  Returns 0 with *out set; 1 when random.uniform
 * has been replaced, in which case the caller must call
 * rbc_random_call_uniform() with the objects redis-py would pass; -1 with
 * an exception set. */
static inline int
rbc_random_uniform(rbc_random_state *rs, double a, double b, double *out)
{
    if (rs->use_fast) {
        *out = rbc_random_uniform_fast(rs, a, b);
        return 0;
    }
    return rbc_random_uniform_python(rs, a, b, out);
}

PyObject *rbc_random_call_uniform(rbc_random_state *rs, PyObject *a, PyObject *b);

/* random() as a double.  Returns 0 with *out set; 1 when random.random has
 * been replaced and returned something that is not a float: *result then
 * holds a new reference to it; -1 with an exception set. */
static inline int
rbc_random_random(rbc_random_state *rs, double *out, PyObject **result)
{
    if (rs->use_fast) {
        *result = NULL;
        *out = rbc_xoshiro_double(rs->xoshiro);
        return 0;
    }
    return rbc_random_random_python(rs, out, result);
}

/* random() when it can be drawn without calling a replaced random.random:
 * from the fast generator, or from the random module's own generator while
 * random.random is its unpatched method.  Returns 0 with *out set; 1 when
 * random.random has been replaced (nothing was called: the caller takes
 * the path of rbc_random_random); -1 with an exception set. */
int rbc_random_random_unpatched(rbc_random_state *rs, double *out);

/* Methods of the module: set_random_source / get_random_source. */
PyObject *rbc_set_random_source(PyObject *module, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames);
PyObject *rbc_get_random_source(PyObject *module, PyObject *unused);

#endif
