// Where spymemcached's KetamaNodeLocator puts each key: the golden data of testdata/spymemcached/.
//
// Usage: java -cp spymemcached.jar:. SpyGolden KEYS_HEX_FILE < CONFIGS
// Each line of CONFIGS: NAME|HASH|WEIGHTED|REPETITIONS|NODE[=WEIGHT],...|REMOVE[|FORMAT]
//   NODE is IP:PORT (an address from a literal, no DNS), HOST/IP:PORT (a named address, made with
//   InetAddress.getByAddress(HOST, IP): what a resolved host name gives, without DNS), or
//   HOST/<unresolved>:PORT (InetSocketAddress.createUnresolved). IPv6 addresses in brackets.
//   WEIGHTED is true when a weights map is passed (KetamaNodeLocator's 4-argument constructor).
//   REMOVE is a node index dropped afterwards with updateLocator (or -1). FORMAT is a
//   KetamaNodeKeyFormatter.Format (SPYMEMCACHED when absent; LIBMEMCACHED needs 160 repetitions).
// Writes NAME.tsv into the working directory: a header, then HEXKEY<TAB>NODE where NODE is
// String.valueOf(the node's InetSocketAddress), exactly as Java prints it.
// Keys are read as Java reads bytes into a String: new String(bytes, UTF_8).
import java.io.*;
import java.lang.reflect.Proxy;
import java.net.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;

import net.spy.memcached.*;
import net.spy.memcached.util.DefaultKetamaNodeLocatorConfiguration;

public class SpyGolden {
    static InetSocketAddress parseNode(String spec) throws Exception {
        int colon = spec.lastIndexOf(':');
        int port = Integer.parseInt(spec.substring(colon + 1));
        String host = spec.substring(0, colon);
        String name = null;
        int slash = host.indexOf('/');
        if (slash >= 0) {
            name = host.substring(0, slash);
            host = host.substring(slash + 1);
            if (host.equals("<unresolved>")) {
                return InetSocketAddress.createUnresolved(name, port);
            }
        }
        if (host.startsWith("[")) {
            host = host.substring(1, host.length() - 1);
        }
        // A literal: parsed without any lookup.
        InetAddress literal = InetAddress.getByName(host);
        InetAddress addr = name == null ? literal : InetAddress.getByAddress(name, literal.getAddress());
        return new InetSocketAddress(addr, port);
    }

    static MemcachedNode node(final InetSocketAddress sa) {
        // KetamaNodeLocator only asks a node for its address; a proxy stands in for a connection.
        return (MemcachedNode) Proxy.newProxyInstance(
            MemcachedNode.class.getClassLoader(), new Class<?>[] {MemcachedNode.class},
            (proxy, method, args) -> {
                switch (method.getName()) {
                    case "getSocketAddress": return sa;
                    case "hashCode": return System.identityHashCode(proxy);
                    case "equals": return proxy == args[0];
                    case "toString": return "node " + sa;
                    default: throw new UnsupportedOperationException(method.getName());
                }
            });
    }

    static byte[] unhex(String s) {
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }

    public static void main(String[] argv) throws Exception {
        List<String> keys = Files.readAllLines(Paths.get(argv[0]));
        BufferedReader configs = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = configs.readLine()) != null) {
            if (line.isBlank() || line.startsWith("#")) continue;
            String[] f = line.split("\\|", -1);
            String name = f[0];
            DefaultHashAlgorithm alg = DefaultHashAlgorithm.valueOf(f[1]);
            boolean weighted = Boolean.parseBoolean(f[2]);
            int reps = Integer.parseInt(f[3]);
            int remove = Integer.parseInt(f[5]);
            KetamaNodeKeyFormatter.Format format = f.length > 6
                ? KetamaNodeKeyFormatter.Format.valueOf(f[6]) : KetamaNodeKeyFormatter.Format.SPYMEMCACHED;
            List<MemcachedNode> nodes = new ArrayList<>();
            Map<InetSocketAddress, Integer> weights = new HashMap<>();
            List<String> header = new ArrayList<>();
            for (String spec : f[4].split(",")) {
                int eq = spec.lastIndexOf('=');
                int w = 1;
                if (eq > 0) {
                    w = Integer.parseInt(spec.substring(eq + 1));
                    spec = spec.substring(0, eq);
                }
                InetSocketAddress sa = parseNode(spec);
                nodes.add(node(sa));
                if (weighted) weights.put(sa, w);
                header.add(String.valueOf(sa) + (weighted ? "=" + w : ""));
            }
            KetamaNodeLocator locator;
            if (format != KetamaNodeKeyFormatter.Format.SPYMEMCACHED) {
                locator = new KetamaNodeLocator(nodes, alg, format, weights);
            } else if (!weighted && reps == 160) {
                // The constructor KetamaConnectionFactory uses: default key format and repetitions.
                locator = new KetamaNodeLocator(nodes, alg);
            } else {
                final int repetitions = reps;
                DefaultKetamaNodeLocatorConfiguration config = reps == 160
                    ? new DefaultKetamaNodeLocatorConfiguration()
                    : new DefaultKetamaNodeLocatorConfiguration() {
                        @Override
                        public int getNodeRepetitions() { return repetitions; }
                    };
                locator = new KetamaNodeLocator(nodes, alg, weights, config);
            }
            String removed = "";
            if (remove >= 0) {
                removed = String.valueOf(nodes.get(remove).getSocketAddress());
                List<MemcachedNode> rest = new ArrayList<>(nodes);
                rest.remove(remove);
                locator.updateLocator(rest);
            }
            try (PrintWriter out = new PrintWriter(new OutputStreamWriter(
                    new FileOutputStream(name + ".tsv"), StandardCharsets.UTF_8))) {
                out.println("# spymemcached KetamaNodeLocator, " + System.getProperty("java.vm.name")
                    + " " + System.getProperty("java.version"));
                out.println("# hash: " + alg);
                out.println("# weighted: " + weighted);
                out.println("# repetitions: " + reps);
                out.println("# format: " + format);
                out.println("# nodes: " + String.join(" ", header));
                out.println("# removed: " + removed);
                for (String hex : keys) {
                    String key = new String(unhex(hex), StandardCharsets.UTF_8);
                    MemcachedNode n = locator.getPrimary(key);
                    out.println(hex + "\t" + n.getSocketAddress());
                }
            }
        }
    }
}
