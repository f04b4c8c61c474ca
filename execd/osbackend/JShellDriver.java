// hybox persistent-context driver for Java, run by execd's OS backend as
// `java JShellDriver.java` (the JDK's source launcher). It speaks the
// framing of internal/pydriver/driver.py:
//   requests on fd 0: "<kind> <decimal byte length>\n<payload>" (init, exec)
//   replies on fd 1: MAGIC + one line of JSON + "\n" (ready, result, error,
//   done); every other byte on fd 1 is the cell's stdout, fd 2 its stderr.
// Cells are evaluated by one JShell (jdk.jshell) with the "local" execution
// engine: snippets run in this JVM, so System.out and System.err are this
// process's fd 1 and fd 2, and variables, methods, classes and imports
// persist between cells. A cell is split into snippets with
// SourceCodeAnalysis.analyzeCompletion; the value of a last snippet that is
// an expression is the cell's result (text/plain). SIGINT stops a running
// snippet (JShell.stop) and is ignored between cells.
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

import jdk.jshell.Diag;
import jdk.jshell.EvalException;
import jdk.jshell.JShell;
import jdk.jshell.JShellException;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.UnresolvedReferenceException;

public class JShellDriver {
    static final String MAGIC = "\u0000\u001bHYBOX\u001d";
    // The imports of the jshell tool's DEFAULT start-up.
    static final String[] IMPORTS = {
        "java.io.*", "java.math.*", "java.net.*", "java.nio.file.*", "java.util.*",
        "java.util.concurrent.*", "java.util.function.*", "java.util.prefs.*",
        "java.util.regex.*", "java.util.stream.*",
    };

    final PrintStream out; // fd 1: user stdout and frames
    final PrintStream err; // fd 2
    final JShell shell;
    volatile boolean running;
    int count;
    // snippet id -> "<cell-N>:" and the cell line of the snippet's first line
    final Map<String, String> cellOf = new HashMap<>();
    final Map<String, Integer> lineOf = new HashMap<>();

    JShellDriver(PrintStream out, PrintStream err) {
        this.out = out;
        this.err = err;
        this.shell = JShell.builder().executionEngine("local").out(out).err(err).build();
    }

    public static void main(String[] args) throws IOException {
        InputStream requests = new java.io.BufferedInputStream(new FileInputStream(FileDescriptor.in));
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        PrintStream err = new PrintStream(new FileOutputStream(FileDescriptor.err), true, StandardCharsets.UTF_8);
        System.setOut(out);
        System.setErr(err);
        System.setIn(InputStream.nullInputStream()); // cells cannot read requests
        JShellDriver d = new JShellDriver(out, err);
        for (String imp : IMPORTS) {
            d.shell.eval("import " + imp + ";");
        }
        d.shell.eval("1 + 1"); // warms the compiler for the first cell
        d.installSigint();
        d.frame("{\"type\":\"ready\"}");
        Requests r = new Requests(requests);
        for (;;) {
            String[] req = r.next();
            if (req == null) {
                System.exit(0);
            }
            if (req[0].equals("exec")) {
                d.run(req[1]);
                d.frame("{\"type\":\"done\"}");
            } else if (req[0].equals("init")) {
                // cwd and environment are the process's own (set by execd)
            }
        }
    }

    void installSigint() {
        try {
            sun.misc.Signal.handle(new sun.misc.Signal("INT"), sig -> {
                if (running) {
                    shell.stop();
                }
            });
        } catch (Throwable t) {
            err.println("hybox: cannot handle SIGINT: " + t);
        }
    }

    void frame(String json) {
        System.out.flush();
        System.err.flush();
        byte[] b = (MAGIC + json + "\n").getBytes(StandardCharsets.UTF_8);
        synchronized (out) { // one write, not split by a cell's threads
            out.write(b, 0, b.length);
            out.flush();
        }
    }

    void run(String cell) {
        count++;
        String name = "<cell-" + count + ">";
        SourceCodeAnalysis sca = shell.sourceCodeAnalysis();
        String rest = cell;
        int line = 1; // the cell line where rest starts
        String value = null;
        running = true;
        try {
            while (!rest.isBlank()) {
                // Snippets start at their first non-blank character, so
                // that their positions and line numbers count from there.
                String blank = rest.substring(0, rest.length() - rest.stripLeading().length());
                line += count(blank, '\n');
                rest = rest.substring(blank.length());
                SourceCodeAnalysis.CompletionInfo ci = sca.analyzeCompletion(rest);
                String src = ci.source();
                String remaining = ci.remaining();
                boolean incomplete = ci.completeness() == SourceCodeAnalysis.Completeness.DEFINITELY_INCOMPLETE
                        || ci.completeness() == SourceCodeAnalysis.Completeness.CONSIDERED_INCOMPLETE
                        || src == null;
                if (incomplete) {
                    src = rest;
                    remaining = "";
                }
                String consumed = rest.substring(0, rest.length() - remaining.length());
                int first = line;
                value = null;
                List<SnippetEvent> events = shell.eval(src);
                for (SnippetEvent e : events) {
                    if (e.causeSnippet() != null) {
                        continue; // an update of a dependent snippet
                    }
                    Snippet s = e.snippet();
                    cellOf.put(s.id(), name);
                    lineOf.put(s.id(), first);
                    if (e.status() == Snippet.Status.REJECTED) {
                        compileError(s, src, name, first, incomplete);
                        return;
                    }
                    if (e.exception() != null) {
                        exception(e.exception());
                        return;
                    }
                    if (isExpression(s) && e.value() != null && !"void".equals(typeName(s))) {
                        value = e.value();
                    }
                }
                line += count(consumed, '\n');
                rest = remaining;
            }
        } finally {
            running = false;
            System.out.flush();
            System.err.flush();
        }
        if (value != null) {
            frame("{\"type\":\"result\",\"data\":{\"text/plain\":" + json(value) + "}}");
        }
    }

    static boolean isExpression(Snippet s) {
        return s.kind() == Snippet.Kind.EXPRESSION
                || s.subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND;
    }

    String typeName(Snippet s) {
        if (s instanceof jdk.jshell.VarSnippet v) {
            return v.typeName();
        }
        if (s instanceof jdk.jshell.ExpressionSnippet x) {
            return x.typeName();
        }
        return "";
    }

    void compileError(Snippet s, String src, String name, int first, boolean incomplete) {
        List<Diag> diags = shell.diagnostics(s).filter(Diag::isError).collect(Collectors.toList());
        List<String> tb = new ArrayList<>();
        String evalue = null;
        String[] lines = src.split("\n", -1);
        for (Diag d : diags) {
            long pos = Math.max(0, d.getStartPosition());
            int l = count(src.substring(0, (int) Math.min(pos, src.length())), '\n');
            String msg = d.getMessage(null);
            String where = name + ":" + (first + l);
            if (evalue == null) {
                evalue = msg.lines().findFirst().orElse("").strip() + " (" + where + ")";
            }
            tb.add(where + ": error: " + msg.stripTrailing());
            if (l < lines.length) {
                tb.add("    " + lines[l].strip());
            }
        }
        if (evalue == null) {
            evalue = (incomplete ? "incomplete snippet" : "the snippet was rejected") + " (" + name + ":" + first + ")";
            tb.add(evalue);
        }
        error("CompilationError", evalue, tb);
    }

    void exception(JShellException x) {
        String ename;
        String evalue = x.getMessage() == null ? "" : x.getMessage();
        if (x instanceof EvalException ee) {
            ename = ee.getExceptionClassName();
        } else if (x instanceof UnresolvedReferenceException ure) {
            ename = "UnresolvedReferenceException";
            evalue = "attempted to use " + ure.getSnippet().source().strip()
                    + ", which cannot be invoked until its missing references are declared";
        } else {
            ename = x.getClass().getName();
        }
        List<String> tb = new ArrayList<>();
        tb.add(evalue.isEmpty() ? ename : ename + ": " + evalue);
        for (StackTraceElement el : x.getStackTrace()) {
            tb.add("\tat " + frameText(el));
        }
        Throwable cause = x.getCause();
        while (cause != null) {
            tb.add("Caused by: " + cause);
            cause = cause.getCause();
        }
        error(ename, evalue, tb);
    }

    // frameText names a snippet's frame by its cell and line ("#3:2" is
    // line 2 of snippet 3).
    String frameText(StackTraceElement el) {
        String file = el.getFileName();
        if (file != null && file.startsWith("#") && cellOf.containsKey(file.substring(1))) {
            String id = file.substring(1);
            String method = el.getMethodName();
            String cls = el.getClassName();
            String where = cls.isEmpty() || cls.startsWith("REPL.") ? method : cls + "." + method;
            if (where.isEmpty() || where.equals("do_it$")) {
                where = "<cell>";
            }
            return where + "(" + cellOf.get(id) + ":" + (lineOf.get(id) + el.getLineNumber() - 1) + ")";
        }
        return el.toString();
    }

    void error(String ename, String evalue, List<String> tb) {
        String lines = tb.stream().map(JShellDriver::json).collect(Collectors.joining(","));
        frame("{\"type\":\"error\",\"ename\":" + json(ename) + ",\"evalue\":" + json(evalue)
                + ",\"traceback\":[" + lines + "]}");
    }

    static int count(String s, char c) {
        int n = 0;
        for (int i = 0; i < s.length(); i++) {
            if (s.charAt(i) == c) {
                n++;
            }
        }
        return n;
    }

    // json quotes s as an ASCII JSON string.
    static String json(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20 || c > 0x7e) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }

    // Requests reads "<kind> <length>\n<payload>" requests.
    static final class Requests {
        final InputStream in;

        Requests(InputStream in) {
            this.in = in;
        }

        // next returns {kind, payload}, or null at the end of input.
        String[] next() throws IOException {
            StringBuilder head = new StringBuilder();
            for (;;) {
                int c = in.read();
                if (c < 0) {
                    return null;
                }
                if (c == '\n') {
                    break;
                }
                head.append((char) c);
            }
            String h = head.toString();
            int sp = h.indexOf(' ');
            int size = Integer.parseInt(h.substring(sp + 1).trim());
            byte[] body = in.readNBytes(size);
            if (body.length < size) {
                return null;
            }
            return new String[] {h.substring(0, sp), new String(body, StandardCharsets.UTF_8)};
        }
    }
}
