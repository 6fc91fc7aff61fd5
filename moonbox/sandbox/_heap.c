/* A faster allocation path for a sandbox's LuaJIT runtime, under the same heap cap.
 *
 * lupa gives a runtime created with max_memory an allocator that counts every byte in a
 * small struct it keeps with the runtime ({used, base_usage, limit}) and refuses growth
 * past the limit; the memory itself comes from the C library's realloc and free. On
 * allocation-heavy Lua (trees of small tables) that costs up to twice LuaJIT's own
 * allocator, and most of it is not instructions but where the blocks land: the C
 * library's bins hand back freed blocks in no particular order, so a tree built after a
 * collection is scattered over the heap.
 *
 * install() puts this module's allocator in the runtime's place (lua_setallocf, which
 * lupa's LuaJIT exports). It keeps lupa's accounting exactly: it updates the same struct,
 * refuses the same growth past the same limit, so get_memory_used, set_max_memory and
 * every memory trip of the sandbox behave as before. Blocks of up to SMALL_MAX bytes come
 * from 64 KiB pages, one size class per page, a bitmap of free blocks per page; a page
 * hands out its free blocks in address order, so what is built together lies together.
 * Larger blocks, and the blocks allocated before install(), stay with the C library:
 * a block is this heap's if it lies in one of its segments (a process-wide map of
 * segments answers that in two loads).
 *
 * The heap lives as long as the runtime: lupa's count of used bytes starts at zero when
 * the runtime is created and returns to zero with the last block lua_close frees (the
 * runtime's own state, allocated first), and that free releases the heap. Nothing else
 * holds it, so no order of collection on the Python side can free it early.
 *
 * Empty pages are reused by any size class; memory goes back to the system when the
 * runtime closes. Segments are mapped as the heap grows, 1 MiB at a time, so a small
 * sandbox takes little address space (an isolated worker has an address-space limit).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* lua.h's allocator type, and the two functions of lupa's LuaJIT that read and set it. */
typedef void *(*lua_Alloc)(void *ud, void *ptr, size_t osize, size_t nsize);
typedef lua_Alloc (*getallocf_fn)(void *L, void **ud);
typedef void (*setallocf_fn)(void *L, lua_Alloc f, void *ud);

/* lupa's accounting, as lupa 2.x lays it out (lupa/_lupa.pyx, struct MemoryStatus). */
typedef struct {
    size_t used;
    size_t base_usage;
    size_t limit;
} MemoryStatus;

#define PAGE_SHIFT 16
#define PAGE_BYTES ((size_t)1 << PAGE_SHIFT)
#define SEGMENT_SHIFT 20
#define SEGMENT_BYTES ((size_t)1 << SEGMENT_SHIFT)
#define PAGES_PER_SEGMENT (SEGMENT_BYTES / PAGE_BYTES)
#define SMALL_MAX 1024
#define GRAIN 16
#define BITMAP_WORDS (PAGE_BYTES / GRAIN / 64)

/* Size classes: 16-byte steps up to 256, then four per doubling up to SMALL_MAX. */
static const uint16_t CLASS_SIZE[] = {
    16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
    320, 384, 448, 512, 640, 768, 896, 1024,
};
#define CLASSES (sizeof CLASS_SIZE / sizeof CLASS_SIZE[0])
static uint8_t class_of_grains[SMALL_MAX / GRAIN + 1];  /* by (size + 15) / 16 */

/* A page's header, at its start; its blocks follow. */
typedef struct Page {
    struct Page *prev, *next;  /* in its class's list of pages with room, or the pool */
    uint32_t size;             /* its blocks' size */
    uint32_t recip;            /* ceil(2^32 / size): a block's index is offset * recip >> 32 */
    uint16_t blocks;           /* how many blocks it holds */
    uint16_t free;             /* how many of them are free */
    uint16_t cursor;           /* the first bitmap word that may hold a free block */
    uint8_t cls;
    uint8_t listed;            /* on its class's list of pages with room */
    uint64_t bits[BITMAP_WORDS];  /* bit i set: block i is free */
} Page;

#define HEADER_BYTES ((sizeof(Page) + GRAIN - 1) & ~(size_t)(GRAIN - 1))

typedef struct {
    MemoryStatus *status;        /* lupa's, in the runtime object */
    Page *current[CLASSES];      /* the page each class allocates from */
    Page *partial[CLASSES];      /* pages with room, not current */
    Page *pool;                  /* empty pages, any class's */
    char *bump, *bump_end;       /* pages of the newest segment never used yet */
    char **segments;             /* every segment mapped, to unmap them at the end */
    size_t segment_count, segment_room;
} Heap;

/* -- the process-wide map of segments ------------------------------------------------- */
/* A bit per 1 MiB of the address space below 2^47, in leaves of 16 GiB made on demand
 * and never freed: whether an address lies in some heap's segment is two loads. A heap
 * only ever asks about its own blocks and foreign ones, so a bit set by another heap
 * never misleads it. */
#define ADDRESS_BITS 47
#define LEAF_SHIFT 34
#define LEAVES ((size_t)1 << (ADDRESS_BITS - LEAF_SHIFT))
#define LEAF_WORDS (((size_t)1 << (LEAF_SHIFT - SEGMENT_SHIFT)) / 64)
static uint64_t *segment_map[LEAVES];
static size_t segments_mapped;  /* by every heap of the process: what a test can watch */

static inline int
in_segment(const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    if (a >> ADDRESS_BITS) {
        return 0;
    }
    const uint64_t *leaf = __atomic_load_n(&segment_map[a >> LEAF_SHIFT], __ATOMIC_ACQUIRE);
    if (leaf == NULL) {
        return 0;
    }
    size_t bit = (a >> SEGMENT_SHIFT) & (LEAF_WORDS * 64 - 1);
    return (int)((__atomic_load_n(&leaf[bit >> 6], __ATOMIC_RELAXED) >> (bit & 63)) & 1);
}

static int
mark_segment(const char *base, int on)
{
    uintptr_t a = (uintptr_t)base;
    uint64_t **slot = &segment_map[a >> LEAF_SHIFT];
    uint64_t *leaf = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (leaf == NULL) {
        uint64_t *made = calloc(LEAF_WORDS, sizeof(uint64_t));
        if (made == NULL) {
            return 0;
        }
        if (__atomic_compare_exchange_n(slot, &leaf, made, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            leaf = made;
        } else {
            free(made);  /* another thread made it first: `leaf` holds theirs */
        }
    }
    size_t bit = (a >> SEGMENT_SHIFT) & (LEAF_WORDS * 64 - 1);
    uint64_t mask = (uint64_t)1 << (bit & 63);
    if (on) {
        __atomic_fetch_or(&leaf[bit >> 6], mask, __ATOMIC_RELEASE);
    } else {
        __atomic_fetch_and(&leaf[bit >> 6], ~mask, __ATOMIC_RELEASE);
    }
    return 1;
}

/* -- segments and pages --------------------------------------------------------------- */
static int
new_segment(Heap *h)
{
    if (h->segment_count == h->segment_room) {
        size_t room = h->segment_room ? 2 * h->segment_room : 16;
        char **grown = realloc(h->segments, room * sizeof(char *));
        if (grown == NULL) {
            return 0;
        }
        h->segments = grown;
        h->segment_room = room;
    }
    /* No more address space than the heap cap: pages of one size class are reused only
     * once empty, so a mod that keeps one small block in every page of one class, then
     * of the next, would otherwise have the host map up to one cap per class while lupa
     * counts one cap. Past it, blocks come from the C library, counted as lupa counts
     * them: what is mapped stays within the cap, what is allocated too. */
    if (h->status->limit > 0 &&
        (h->segment_count + 1) * SEGMENT_BYTES > h->status->limit + SEGMENT_BYTES) {
        return 0;
    }
    /* Twice the size, then trimmed to an aligned segment. */
    char *raw = mmap(NULL, 2 * SEGMENT_BYTES, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        return 0;
    }
    char *base = (char *)(((uintptr_t)raw + SEGMENT_BYTES - 1) & ~(uintptr_t)(SEGMENT_BYTES - 1));
    if (base > raw) {
        munmap(raw, (size_t)(base - raw));
    }
    munmap(base + SEGMENT_BYTES, (size_t)(raw + 2 * SEGMENT_BYTES - (base + SEGMENT_BYTES)));
    if ((uintptr_t)base >> ADDRESS_BITS || !mark_segment(base, 1)) {
        munmap(base, SEGMENT_BYTES);
        return 0;
    }
    h->segments[h->segment_count++] = base;
    __atomic_fetch_add(&segments_mapped, 1, __ATOMIC_RELAXED);
    h->bump = base;
    h->bump_end = base + SEGMENT_BYTES;
    return 1;
}

static Page *
new_page(Heap *h, unsigned cls)
{
    Page *p = h->pool;
    if (p != NULL) {
        h->pool = p->next;
    } else {
        if (h->bump == h->bump_end && !new_segment(h)) {
            return NULL;
        }
        p = (Page *)h->bump;
        h->bump += PAGE_BYTES;
    }
    uint32_t size = CLASS_SIZE[cls];
    p->prev = p->next = NULL;
    p->size = size;
    p->recip = (uint32_t)((((uint64_t)1 << 32) + size - 1) / size);
    p->blocks = (uint16_t)((PAGE_BYTES - HEADER_BYTES) / size);
    p->free = p->blocks;
    p->cursor = 0;
    p->cls = (uint8_t)cls;
    p->listed = 0;
    size_t words = ((size_t)p->blocks + 63) / 64;
    memset(p->bits, 0xff, words * sizeof(uint64_t));
    if (p->blocks % 64) {
        p->bits[words - 1] = ((uint64_t)1 << (p->blocks % 64)) - 1;
    }
    memset(p->bits + words, 0, (BITMAP_WORDS - words) * sizeof(uint64_t));
    return p;
}

/* A page with room is listed once it has this many free blocks: one with a free block or
 * two is not worth scanning for them. */
static inline unsigned
listing_threshold(const Page *p)
{
    return p->blocks >= 64 ? p->blocks / 16u : 1u;
}

static void
list_page(Heap *h, Page *p)
{
    p->prev = NULL;
    p->next = h->partial[p->cls];
    if (p->next != NULL) {
        p->next->prev = p;
    }
    h->partial[p->cls] = p;
    p->listed = 1;
}

static void
unlist_page(Heap *h, Page *p)
{
    if (p->prev != NULL) {
        p->prev->next = p->next;
    } else {
        h->partial[p->cls] = p->next;
    }
    if (p->next != NULL) {
        p->next->prev = p->prev;
    }
    p->prev = p->next = NULL;
    p->listed = 0;
}

static inline void *
take_from(Page *p)
{
    size_t words = ((size_t)p->blocks + 63) / 64;
    for (size_t w = p->cursor; w < words; w++) {
        uint64_t bits = p->bits[w];
        if (bits) {
            unsigned b = (unsigned)__builtin_ctzll(bits);
            p->bits[w] = bits & (bits - 1);
            p->cursor = (uint16_t)w;
            p->free--;
            return (char *)p + HEADER_BYTES + (w * 64 + b) * p->size;
        }
    }
    return NULL;
}

/* A block of class `cls`, or NULL when no page can be had. */
static void *
take(Heap *h, unsigned cls)
{
    Page *p = h->current[cls];
    if (p != NULL) {
        void *block = take_from(p);
        if (block != NULL) {
            return block;
        }
        /* Used up to its end: frees list it again once it has room. */
        h->current[cls] = NULL;
        p->cursor = 0;
        if (p->free >= listing_threshold(p)) {
            list_page(h, p);
        }
    }
    p = h->partial[cls];
    if (p != NULL) {
        unlist_page(h, p);
        p->cursor = 0;
    } else if ((p = new_page(h, cls)) == NULL) {
        return NULL;
    }
    h->current[cls] = p;
    return take_from(p);
}

static inline Page *
page_of(const void *ptr)
{
    return (Page *)((uintptr_t)ptr & ~(uintptr_t)(PAGE_BYTES - 1));
}

static void
give_back(Heap *h, void *ptr)
{
    Page *p = page_of(ptr);
    size_t offset = (size_t)((char *)ptr - ((char *)p + HEADER_BYTES));
    size_t i = (size_t)(((uint64_t)offset * p->recip) >> 32);
    p->bits[i >> 6] |= (uint64_t)1 << (i & 63);
    p->free++;
    if (h->current[p->cls] == p) {
        if ((i >> 6) < p->cursor) {
            p->cursor = (uint16_t)(i >> 6);
        }
        return;
    }
    if (p->free == p->blocks) {
        if (p->listed) {
            unlist_page(h, p);
        }
        p->next = h->pool;
        h->pool = p;
    } else if (!p->listed && p->free >= listing_threshold(p)) {
        list_page(h, p);
    }
}

static void
destroy(Heap *h)
{
    for (size_t i = 0; i < h->segment_count; i++) {
        mark_segment(h->segments[i], 0);
        munmap(h->segments[i], SEGMENT_BYTES);
    }
    __atomic_fetch_sub(&segments_mapped, h->segment_count, __ATOMIC_RELAXED);
    free(h->segments);
    free(h);
}

/* -- the allocator ---------------------------------------------------------------------- */
/* Small sizes come from the pages (or the C library when no page can be had), the rest
 * from the C library. */
static inline void *
new_block(Heap *h, size_t n)
{
    if (n <= SMALL_MAX) {
        void *block = take(h, class_of_grains[(n + GRAIN - 1) / GRAIN]);
        if (block != NULL) {
            return block;
        }
    }
    return malloc(n);
}

static void *
heap_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    Heap *h = ud;
    MemoryStatus *status = h->status;
    if (ptr == NULL) {
        osize = 0;  /* then osize tells the kind of object: not a size */
    }
    if (nsize == 0) {
        if (ptr != NULL) {
            if (in_segment(ptr)) {
                give_back(h, ptr);
            } else {
                free(ptr);
            }
            status->used -= osize;
            if (status->used == 0) {
                destroy(h);  /* the runtime's last block: lua_close has ended */
            }
        }
        return NULL;
    }
    if (nsize == osize) {
        return ptr;
    }
    /* lupa's limit, as lupa checks it. */
    if (status->limit > 0 && nsize > osize && status->limit <= status->used + nsize - osize) {
        return NULL;
    }
    void *moved;
    if (ptr != NULL && in_segment(ptr)) {
        if (nsize <= page_of(ptr)->size) {
            status->used += nsize - osize;
            return ptr;  /* fits where it is */
        }
        moved = new_block(h, nsize);
        if (moved == NULL) {
            return NULL;
        }
        memcpy(moved, ptr, osize);
        give_back(h, ptr);
    } else if (ptr != NULL && nsize < osize) {
        moved = realloc(ptr, nsize);  /* the C library's block shrinks where it is */
    } else if (nsize <= SMALL_MAX) {
        moved = new_block(h, nsize);
        if (moved != NULL && ptr != NULL) {
            memcpy(moved, ptr, osize);
            free(ptr);
        }
    } else {
        moved = realloc(ptr, nsize);
    }
    if (moved != NULL) {
        status->used += nsize - osize;
    }
    return moved;
}

/* -- Python ----------------------------------------------------------------------------- */
static int
lua_api(const char *library, getallocf_fn *get, setallocf_fn *set)
{
    /* The module is loaded already (the runtime exists): this only finds its handle. */
    void *handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
    if (handle == NULL) {
        return 0;
    }
    *get = (getallocf_fn)dlsym(handle, "lua_getallocf");
    *set = (setallocf_fn)dlsym(handle, "lua_setallocf");
    dlclose(handle);
    return *get != NULL && *set != NULL;
}

PyDoc_STRVAR(install_doc,
"install(library, thread, runtime) -> bool\n\n"
"Put this module's allocator in place of lupa's in a runtime created with max_memory.\n"
"``library`` is the path of lupa's LuaJIT extension module; ``thread`` the address of a\n"
"live coroutine of ``runtime`` (as tostring shows it). Returns False, changing nothing,\n"
"where that cannot be done: the library's functions are missing, or the runtime's\n"
"allocator is not lupa's memory-limited one, whose state lies in the runtime object.");

static PyObject *
install(PyObject *self, PyObject *args)
{
    const char *library;
    unsigned long long address;
    PyObject *runtime;
    if (!PyArg_ParseTuple(args, "sKO:install", &library, &address, &runtime)) {
        return NULL;
    }
    getallocf_fn get;
    setallocf_fn set;
    if (address == 0 || !lua_api(library, &get, &set)) {
        Py_RETURN_FALSE;
    }
    void *L = (void *)(uintptr_t)address;
    void *ud = NULL;
    lua_Alloc current = get(L, &ud);
    MemoryStatus *status = ud;
    /* Installed once, and only over lupa's memory-limited allocator: its state is the
     * struct inside the runtime object itself (a runtime without max_memory has LuaJIT's
     * own allocator, whose state is elsewhere), holding a count and a limit above it. */
    const char *object = (const char *)runtime;
    const char *state = (const char *)status;
    if (current == heap_alloc || status == NULL ||
        state < object + sizeof(PyObject) ||
        state + sizeof(MemoryStatus) > object + Py_TYPE(runtime)->tp_basicsize ||
        ((uintptr_t)state & (sizeof(size_t) - 1)) != 0 || status->used == 0 ||
        (status->limit != 0 && status->limit < status->used)) {
        Py_RETURN_FALSE;
    }
    Heap *h = calloc(1, sizeof(Heap));
    if (h == NULL) {
        return PyErr_NoMemory();
    }
    h->status = status;
    set(L, heap_alloc, h);
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(installed_doc,
"installed(library, thread) -> bool\n\n"
"Whether the runtime of the live coroutine at ``thread`` allocates through this module.");

static PyObject *
installed(PyObject *self, PyObject *args)
{
    const char *library;
    unsigned long long address;
    if (!PyArg_ParseTuple(args, "sK:installed", &library, &address)) {
        return NULL;
    }
    getallocf_fn get;
    setallocf_fn set;
    if (address == 0 || !lua_api(library, &get, &set)) {
        Py_RETURN_FALSE;
    }
    return PyBool_FromLong(get((void *)(uintptr_t)address, NULL) == heap_alloc);
}

PyDoc_STRVAR(segments_doc,
"segments() -> int\n\n"
"How many 1 MiB segments the heaps of this process hold mapped now.");

static PyObject *
segments(PyObject *self, PyObject *unused)
{
    return PyLong_FromSize_t(__atomic_load_n(&segments_mapped, __ATOMIC_RELAXED));
}

static PyMethodDef methods[] = {
    {"install", install, METH_VARARGS, install_doc},
    {"installed", installed, METH_VARARGS, installed_doc},
    {"segments", segments, METH_NOARGS, segments_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef heap_module = {
    PyModuleDef_HEAD_INIT, "_heap",
    "The allocator of sandbox runtimes: lupa's accounting and heap cap on a faster path.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__heap(void)
{
    for (size_t grains = 0; grains <= SMALL_MAX / GRAIN; grains++) {
        unsigned cls = 0;
        while (CLASS_SIZE[cls] < grains * GRAIN) {
            cls++;
        }
        class_of_grains[grains] = (uint8_t)cls;
    }
    return PyModule_Create(&heap_module);
}
