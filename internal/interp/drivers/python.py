# Airlock code-context driver for Python 3 (standard library only).
#
# Started by the daemon as `python3 -c <this file>` with stdin open. It reads
# the frame nonce (one line) and then commands from its original stdin and
# runs each as a cell in one persistent namespace. A command is a line
# "ID NENV CODELEN", then NENV times a line
# "KEYLEN VALUELEN" followed by the key and value bytes, then CODELEN bytes
# of code (UTF-8; lengths in bytes). Frames go out on private duplicates of the
# original stdout (everything) and stderr (end markers only), each frame a
# line: "\x1e" NONCE " " JSON "\n". File descriptors 1 and 2 are pipes this
# driver reads, so output written by the cell at any level (print,
# os.write, subprocesses) is captured and sent in order; fd 0 is /dev/null.
# See internal/interp/drivers.go for the protocol.
#
# Start-up time counts (a context's first cell is measured against a bare
# interpreter start): the driver imports only C modules up front (_thread,
# _json, _ast, _signal, select, binascii) and the rest when first needed.


def _airlock_main():
    import _ast
    import _json
    import _signal
    import _thread
    import binascii
    import builtins
    import codecs
    import os
    import select
    import sys
    import time

    env = os.environ
    max_out = int(env.pop("AIRLOCK_INTERP_MAX_OUTPUT", "1048576"))
    max_text = int(env.pop("AIRLOCK_INTERP_MAX_TEXT", "1048576"))
    max_image = int(env.pop("AIRLOCK_INTERP_MAX_IMAGE", "8388608"))
    # Charts render off screen, whatever the environment says.
    env["MPLBACKEND"] = "Agg"

    # Private, close-on-exec duplicates (os.dup makes non-inheritable
    # descriptors): what the cell starts inherits none of them.
    cmd_fd = os.dup(0)
    frames_fd = os.dup(1)
    aux_fd = os.dup(2)
    nul = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nul, 0)
    os.close(nul)
    # The nonce is the first line of the commands, never in the
    # environment (see drivers.go).
    cmds = os.fdopen(cmd_fd, "rb", buffering=1 << 16)
    nonce = cmds.readline().strip()
    if not nonce or not all(c in b"0123456789abcdef" for c in nonce):
        os._exit(2)
    prefix = b"\x1e" + nonce + b" "
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    wake_r, wake_w = os.pipe()
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.close(out_w)
    os.close(err_w)
    for fd in (out_r, err_r, wake_r, wake_w):
        os.set_blocking(fd, False)
    decoders = {
        out_r: ("stdout", codecs.getincrementaldecoder("utf-8")("replace")),
        err_r: ("stderr", codecs.getincrementaldecoder("utf-8")("replace")),
    }

    lock = _thread.RLock()

    class State:
        cell = None  # id of the running cell, None between cells
        out = 0  # output characters sent for the cell
        truncated = False
        pend_stream = None  # coalesced writes not yet sent
        pend = []
        pend_len = 0
        pend_since = 0.0
        running = False  # SIGINT raises KeyboardInterrupt only while True
        in_io = False  # the main thread is writing a frame
        sigint = False  # a SIGINT arrived during in_io

    st = State()
    main_ident = _thread.get_ident()
    quote = _json.encode_basestring_ascii

    class Raw:
        """Text that is JSON already."""

        def __init__(self, text):
            self.text = text

    def enc(o):
        # A JSON encoder for the frames' shapes (the json module would
        # cost its import, and re's, at every start).
        t = type(o)
        if t is str:
            return quote(o)
        if o is None:
            return "null"
        if o is True:
            return "true"
        if o is False:
            return "false"
        if t is int:
            return int.__repr__(o)
        if t is dict:
            return "{" + ",".join(quote(str(k)) + ":" + enc(v) for k, v in o.items()) + "}"
        if t is Raw:
            return o.text
        return quote(str(o))

    def write_all(fd, data):
        mine = _thread.get_ident() == main_ident
        if mine:
            st.in_io = True
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            if mine:
                st.in_io = False
        if mine and st.sigint and st.running:
            st.sigint = False
            raise KeyboardInterrupt

    def send(obj, fd=None):
        write_all(frames_fd if fd is None else fd, prefix + enc(obj).encode() + b"\n")

    def emit_text(stream, text):
        if not text:
            return
        if st.cell is None:
            return  # output between cells has no cell to go to
        room = max_out - st.out
        if room <= 0:
            st.truncated = True
            return
        if len(text) > room:
            text = text[:room]
            st.truncated = True
        st.out += len(text)
        send({"t": stream, "d": text})

    def flush_pending():
        if st.pend:
            text = "".join(st.pend)
            stream = st.pend_stream
            st.pend, st.pend_len, st.pend_stream = [], 0, None
            emit_text(stream, text)

    def drain_pipes():
        # Reads what fds 1 and 2 hold now. Called with lock held.
        got = []
        for fd in (out_r, err_r):
            chunks = []
            while True:
                try:
                    b = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if not b:
                    break
                chunks.append(b)
            if chunks:
                stream, dec = decoders[fd]
                got.append((stream, dec.decode(b"".join(chunks))))
        if got:
            flush_pending()
            for stream, text in got:
                emit_text(stream, text)
        return bool(got)

    def write_text(stream, text):
        with lock:
            drain_pipes()
            if st.pend and st.pend_stream != stream:
                flush_pending()
            if not st.pend:
                st.pend_since = time.monotonic()
                st.pend_stream = stream
                try:
                    os.write(wake_w, b"x")
                except BlockingIOError:
                    pass
            st.pend.append(text)
            st.pend_len += len(text)
            if st.pend_len >= 16384:
                flush_pending()

    def pump():
        while True:
            timeout = None
            if st.pend:
                timeout = max(0.0, st.pend_since + 0.02 - time.monotonic())
            try:
                ready, _, _ = select.select([out_r, err_r, wake_r], [], [], timeout)
            except InterruptedError:
                continue
            with lock:
                if wake_r in ready:
                    try:
                        os.read(wake_r, 4096)
                    except BlockingIOError:
                        pass
                drain_pipes()
                if st.pend and time.monotonic() - st.pend_since >= 0.02:
                    flush_pending()

    class _Bytes:
        def __init__(self, text):
            self._text = text

        def write(self, b):
            self._text.write(bytes(b).decode("utf-8", "replace"))
            return len(b)

        def flush(self):
            pass

        def fileno(self):
            return self._text.fileno()

    class _Text:
        encoding = "utf-8"
        errors = "replace"
        newlines = None
        line_buffering = True
        closed = False

        def __init__(self, name, fd):
            self.name = "<%s>" % name
            self._stream = name
            self._fd = fd
            self.buffer = _Bytes(self)

        def write(self, s):
            if not isinstance(s, str):
                raise TypeError("write() argument must be str, not %s" % type(s).__name__)
            write_text(self._stream, s)
            return len(s)

        def writelines(self, lines):
            for s in lines:
                self.write(s)

        def flush(self):
            pass

        def fileno(self):
            return self._fd

        def isatty(self):
            return False

        def writable(self):
            return True

        def readable(self):
            return False

        def seekable(self):
            return False

    sys.stdout = _Text("stdout", 1)
    sys.stderr = _Text("stderr", 2)
    sys.stdin = open(0, "r", closefd=False)
    sys.argv = [""]
    _thread.start_new_thread(pump, ())

    def on_sigint(signum, frame):
        if not st.running:
            return
        if st.in_io:
            st.sigint = True
            return
        raise KeyboardInterrupt

    _signal.signal(_signal.SIGINT, on_sigint)

    # The user's namespace is a fresh __main__ module.
    main_mod = type(sys)("__main__")
    main_mod.__builtins__ = builtins
    ns = main_mod.__dict__
    sys.modules["__main__"] = main_mod

    def cap(s, limit):
        if len(s) > limit:
            return s[:limit] + "\n...[truncated]"
        return s

    def mime_bundle(obj):
        data = {}
        methods = (
            ("_repr_html_", "text/html"),
            ("_repr_markdown_", "text/markdown"),
            ("_repr_svg_", "image/svg+xml"),
            ("_repr_png_", "image/png"),
            ("_repr_jpeg_", "image/jpeg"),
            ("_repr_latex_", "text/latex"),
            ("_repr_json_", "application/json"),
            ("_repr_javascript_", "application/javascript"),
        )
        for meth, key in methods:
            # Look the method up on the type, as IPython does: objects that
            # answer every attribute (mocks, proxies) do not count.
            if getattr(type(obj), meth, None) is None:
                continue
            try:
                v = getattr(obj, meth)()
            except Exception:
                continue
            if isinstance(v, tuple):
                v = v[0]
            if v is None:
                continue
            if key in ("image/png", "image/jpeg"):
                if isinstance(v, str):
                    raw_len = len(v) * 3 // 4
                else:
                    raw_len = len(v)
                    v = binascii.b2a_base64(v, newline=False).decode("ascii")
                if raw_len > max_image:
                    data["x-airlock/omitted"] = "%s image of %d bytes" % (key, raw_len)
                    continue
            elif key == "application/json":
                try:
                    import json

                    v = Raw(json.dumps(v, ensure_ascii=True, default=str))
                except Exception:
                    continue
                if len(v.text) > max_text:
                    continue
            else:
                v = cap(str(v), max_text)
            data[key] = v
        data["text/plain"] = cap(repr(obj), max_text)
        return data

    def display(*objs, main=False):
        for obj in objs:
            if obj is None and main:
                continue
            bundle = mime_bundle(obj)
            with lock:
                drain_pipes()
                flush_pending()
                send({"t": "result", "id": st.cell, "main": main, "data": bundle})

    ns["display"] = display

    def capture_figures(*args, **kwargs):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        import io

        for num in plt.get_fignums():
            fig = plt.figure(num)
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
            png = buf.getvalue()
            bundle = {"text/plain": repr(fig)}
            if len(png) > max_image:
                bundle["x-airlock/omitted"] = "image/png image of %d bytes" % len(png)
            else:
                bundle["image/png"] = binascii.b2a_base64(png, newline=False).decode("ascii")
            with lock:
                drain_pipes()
                flush_pending()
                send({"t": "result", "id": st.cell, "main": False, "data": bundle})
        plt.close("all")

    class PyplotHook:
        """Makes pyplot.show() emit the open figures, like an inline backend."""

        def find_spec(self, name, path, target=None):
            if name != "matplotlib.pyplot":
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            orig = getattr(loader, "exec_module", None)
            if orig is None:
                return spec

            def exec_module(module):
                orig(module)
                module.show = capture_figures

            try:
                loader.exec_module = exec_module
            except Exception:
                pass
            return spec

    sys.meta_path.insert(0, PyplotHook())

    # The cells' sources, for tracebacks and warnings: handed to linecache
    # once something has imported it (the most recent 32 MiB are kept).
    sources = {}
    src_state = [0, False]  # bytes kept, linecache seen

    def keep_source(name, code):
        sources[name] = code
        src_state[0] += len(code)
        while src_state[0] > 32 << 20 and len(sources) > 1:
            old = next(iter(sources))
            src_state[0] -= len(sources.pop(old))
        lc = sys.modules.get("linecache")
        if lc is None:
            return
        if not src_state[1]:
            src_state[1] = True
            sync_sources(lc)
        else:
            lc.cache[name] = (len(code), None, code.splitlines(True), name)

    def sync_sources(lc):
        for name, code in sources.items():
            lc.cache[name] = (len(code), None, code.splitlines(True), name)

    def format_error(e, syntax=False):
        import linecache
        import traceback

        sync_sources(linecache)
        src_state[1] = True

        tb = e.__traceback__
        # Drop the driver's own frames.
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        if syntax:
            lines = traceback.format_exception_only(type(e), e)
        else:
            lines = traceback.format_exception(type(e), e, tb)
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        return {
            "name": type(e).__name__,
            "value": cap(str(e), max_text),
            "traceback": cap("".join(lines), max_text),
        }

    loop_box = []

    def run_code(code):
        result = eval(code, ns)
        if code.co_flags & 0x80:  # CO_COROUTINE: the cell awaits
            import asyncio

            if not loop_box:
                loop_box.append(asyncio.new_event_loop())
            result = loop_box[0].run_until_complete(result)
        return result

    flags = getattr(_ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)

    def execute(cell_id, code):
        filename = "<cell-%d>" % cell_id
        keep_source(filename, code)
        try:
            tree = compile(code, filename, "exec", _ast.PyCF_ONLY_AST | flags, dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            return format_error(e, syntax=True)
        last = None
        if tree.body and isinstance(tree.body[-1], _ast.Expr):
            last = _ast.Expression(tree.body.pop().value)
        try:
            run_code(compile(tree, filename, "exec", flags, dont_inherit=True))
            if last is not None:
                value = run_code(compile(last, filename, "eval", flags, dont_inherit=True))
                if value is not None:
                    ns["_"] = value
                    display(value, main=True)
            capture_figures()
        except BaseException as e:  # includes KeyboardInterrupt and SystemExit
            try:
                capture_figures()
            except BaseException:
                pass
            return format_error(e)
        return None

    def run(cell_id, cell_env, code):
        saved = {}
        for k, v in cell_env.items():
            saved[k] = env.get(k)
            env[k] = v
        with lock:
            st.cell, st.out, st.truncated = cell_id, 0, False
        err = None
        try:
            st.running = True
            try:
                err = execute(cell_id, code)
            finally:
                st.running = False
        except BaseException as e:  # an interrupt that landed in the driver
            err = format_error(e)
        for k, v in saved.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        with lock:
            drain_pipes()
            flush_pending()
            if err is not None:
                send(dict(err, t="error", id=cell_id))
            end = {"t": "end", "id": cell_id, "truncated": st.truncated}
            st.cell = None
            send(end)
            send(end, aux_fd)

    def text(n):
        b = cmds.read(n)
        if len(b) != n:
            raise EOFError
        return b.decode("utf-8", "surrogateescape")

    send({"t": "ready", "lang": "python", "version": sys.version.split()[0], "pid": os.getpid()})
    try:
        while True:
            head = cmds.readline().split()
            if len(head) != 3:
                break
            cell_id, nenv, ncode = (int(x) for x in head)
            cell_env = {}
            for _ in range(nenv):
                klen, vlen = (int(x) for x in cmds.readline().split())
                k = text(klen)
                cell_env[k] = text(vlen)
            run(cell_id, cell_env, text(ncode))
    except (EOFError, ValueError):
        pass
    os._exit(0)


_airlock_main()
