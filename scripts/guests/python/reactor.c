/*
 * hybox's CPython WASI reactor: the entry points the host calls instead of
 * main(). Linked with libpython by scripts/guests/build-python.sh.
 *
 * Exports:
 *   hybox_init()  initialises the interpreter and loads the driver script
 *                 named by HYBOX_DRIVER (internal/pydriver/driver.py); its
 *                 reactor_init() sets up the kernel. 0 = ready.
 *   hybox_run()   calls the driver's reactor_serve(): it answers every
 *                 request queued on fd 0 (framed as in internal/pydriver),
 *                 writing frames and user output on fd 1 and 2. 0 = done.
 *   hybox_slots() the address of struct hybox_slots (below): where the host
 *                 writes to raise an exception inside a running hybox_run.
 *   hybox_main()  instead of all of the above, in a fresh instance: runs
 *                 CPython's main with the WASI arguments (`python3 ...` as a
 *                 shell command) and returns its exit status.
 *
 * When hybox_init returns, the wasm stack is back at rest and the
 * interpreter's whole state is in linear memory, so the host may snapshot
 * that memory and start new instances from the copy without calling
 * hybox_init again.
 *
 * Interrupts: CPython's eval loop checks interp->ceval.eval_breaker at every
 * backward jump and call; when it is set and tstate->async_exc holds an
 * exception type, it raises that exception in the running frame (this is
 * what PyThreadState_SetAsyncExc does from another thread). The host, which
 * cannot call into the instance while it runs, does the same with three
 * memory writes: *async_exc = keyboard_interrupt (or timeout_error),
 * *pending_async = 1, *eval_breaker = 1.
 */
#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE 1
#include "Python.h"
#include "pycore_interp.h"
#include "pycore_pystate.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wasi/api.h>

struct hybox_slots {
	uint32_t version;            /* 1 */
	uint32_t async_exc;          /* address of tstate->async_exc */
	uint32_t pending_async;      /* address of interp->ceval.pending.async_exc */
	uint32_t eval_breaker;       /* address of interp->ceval.eval_breaker */
	uint32_t keyboard_interrupt; /* value to store: PyExc_KeyboardInterrupt */
	uint32_t timeout_error;      /* value to store: PyExc_TimeoutError */
};

static struct hybox_slots slots;
static PyObject *serve; /* the driver's reactor_serve */

/* Every delivered interrupt releases one reference to its type (ceval's
 * Py_DECREF after raising); keep a large stock so the host never has to. */
#define REF_STOCK (1 << 20)

static void stock_refs(void)
{
	if (Py_REFCNT(PyExc_KeyboardInterrupt) < REF_STOCK / 2) {
		for (int i = 0; i < REF_STOCK; i++) {
			Py_INCREF(PyExc_KeyboardInterrupt);
		}
	}
	if (Py_REFCNT(PyExc_TimeoutError) < REF_STOCK / 2) {
		for (int i = 0; i < REF_STOCK; i++) {
			Py_INCREF(PyExc_TimeoutError);
		}
	}
}

static int add_path(PyConfig *config, const char *path)
{
	wchar_t *w = Py_DecodeLocale(path, NULL);
	if (w == NULL) {
		return -1;
	}
	PyStatus st = PyWideStringList_Append(&config->module_search_paths, w);
	PyMem_RawFree(w);
	return PyStatus_Exception(st) ? -1 : 0;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		return NULL;
	}
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	while (buf != NULL) {
		size_t n = fread(buf + len, 1, cap - len - 1, f);
		len += n;
		if (n == 0) {
			break;
		}
		if (len + 1 == cap) {
			cap *= 2;
			char *nb = realloc(buf, cap);
			if (nb == NULL) {
				free(buf);
			}
			buf = nb;
		}
	}
	fclose(f);
	if (buf != NULL) {
		buf[len] = 0;
	}
	return buf;
}

__attribute__((export_name("hybox_init"))) int hybox_init(void)
{
	PyConfig config;
	PyConfig_InitPythonConfig(&config);
	config.parse_argv = 0;
	config.install_signal_handlers = 0;
	config.buffered_stdio = 0;
	config.write_bytecode = 0;
	config.site_import = 1;
	config.safe_path = 0;

	/* sys.path: PYTHONPATH (the host's site directory), then the stdlib. */
	config.module_search_paths_set = 1;
	const char *pp = getenv("PYTHONPATH");
	if (pp != NULL && *pp) {
		char *copy = strdup(pp);
		for (char *tok = strtok(copy, ":"); tok != NULL; tok = strtok(NULL, ":")) {
			if (add_path(&config, tok) != 0) {
				free(copy);
				return 2;
			}
		}
		free(copy);
	}
	const char *stdlib = getenv("HYBOX_STDLIB");
	if (add_path(&config, stdlib ? stdlib : "/usr/local/lib/python311.zip") != 0) {
		return 2;
	}
	PyConfig_SetString(&config, &config.program_name, L"python3");
	PyConfig_SetString(&config, &config.home, L"/usr/local");

	PyStatus st = Py_InitializeFromConfig(&config);
	PyConfig_Clear(&config);
	if (PyStatus_Exception(st)) {
		fprintf(stderr, "hybox_init: %s: %s\n", st.func ? st.func : "", st.err_msg ? st.err_msg : "");
		return 3;
	}

	const char *driver = getenv("HYBOX_DRIVER");
	if (driver == NULL) {
		fprintf(stderr, "hybox_init: HYBOX_DRIVER is not set\n");
		return 4;
	}
	char *src = read_file(driver);
	if (src == NULL) {
		fprintf(stderr, "hybox_init: cannot read %s\n", driver);
		return 4;
	}
	PyObject *code = Py_CompileString(src, driver, Py_file_input);
	free(src);
	if (code == NULL) {
		PyErr_Print();
		return 5;
	}
	PyObject *mod = PyImport_ExecCodeModuleEx("hybox_driver", code, driver);
	Py_DECREF(code);
	if (mod == NULL) {
		PyErr_Print();
		return 5;
	}
	PyObject *r = PyObject_CallMethod(mod, "reactor_init", NULL);
	if (r == NULL) {
		PyErr_Print();
		Py_DECREF(mod);
		return 6;
	}
	Py_DECREF(r);
	serve = PyObject_GetAttrString(mod, "reactor_serve");
	Py_DECREF(mod);
	if (serve == NULL) {
		PyErr_Print();
		return 6;
	}

	PyThreadState *tstate = _PyThreadState_GET();
	stock_refs();
	slots.version = 1;
	slots.async_exc = (uint32_t)(uintptr_t)&tstate->async_exc;
	slots.pending_async = (uint32_t)(uintptr_t)&tstate->interp->ceval.pending.async_exc;
	slots.eval_breaker = (uint32_t)(uintptr_t)&tstate->interp->ceval.eval_breaker;
	slots.keyboard_interrupt = (uint32_t)(uintptr_t)PyExc_KeyboardInterrupt;
	slots.timeout_error = (uint32_t)(uintptr_t)PyExc_TimeoutError;
	PyGC_Collect();
	return 0;
}

__attribute__((export_name("hybox_run"))) int hybox_run(void)
{
	if (serve == NULL) {
		return 1;
	}
	stock_refs();
	PyObject *r = PyObject_CallNoArgs(serve);
	int rc = 0;
	if (r == NULL) {
		/* The driver reports user errors itself; this is an interrupt that
		 * arrived outside of it, or a driver bug. */
		PyErr_Print();
		rc = 2;
	} else {
		Py_DECREF(r);
	}
	/* An interrupt the host raised too late for this run must not land in
	 * the next one. */
	PyThreadState *tstate = _PyThreadState_GET();
	if (tstate->async_exc != NULL) {
		Py_CLEAR(tstate->async_exc);
	}
	tstate->interp->ceval.pending.async_exc = 0;
	PyErr_Clear();
	return rc;
}

__attribute__((export_name("hybox_slots"))) uint32_t hybox_slots(void)
{
	return (uint32_t)(uintptr_t)&slots;
}

__attribute__((export_name("hybox_main"))) int hybox_main(void)
{
	__wasi_size_t argc = 0, size = 0;
	if (__wasi_args_sizes_get(&argc, &size) != 0) {
		return 120;
	}
	char **argv = calloc(argc + 1, sizeof(char *));
	char *buf = malloc(size + 1);
	if (argv == NULL || buf == NULL || __wasi_args_get((uint8_t **)argv, (uint8_t *)buf) != 0) {
		return 120;
	}
	return Py_BytesMain((int)argc, argv);
}
