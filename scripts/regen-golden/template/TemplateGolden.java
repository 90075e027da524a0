// Where ConsistentHashLoadBalance sends each key: the golden data of testdata/template/.
//
// Usage: java -Dfile.encoding=UTF-8 TemplateGolden KEYS_HEX_FILE < CONFIGS
// Each line of CONFIGS: NAME|VNODES|NODE,NODE,...|ADD|REMOVE  (ADD: a node passed to addNode after
// construction, REMOVE: one passed to removeNode; either may be empty). Writes NAME.tsv.
import java.io.*;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;

public class TemplateGolden {
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
            int vnodes = Integer.parseInt(f[1]);
            List<String> nodes = Arrays.asList(f[2].split(","));
            ConsistentHashLoadBalance lb = new ConsistentHashLoadBalance(nodes, vnodes);
            if (!f[3].isEmpty()) lb.addNode(f[3]);
            if (!f[4].isEmpty()) lb.removeNode(f[4]);
            try (PrintWriter out = new PrintWriter(new OutputStreamWriter(
                    new FileOutputStream(f[0] + ".tsv"), StandardCharsets.UTF_8))) {
                out.println("# ConsistentHashLoadBalance, " + System.getProperty("java.vm.name") + " "
                    + System.getProperty("java.version") + ", default charset " + Charset.defaultCharset());
                out.println("# vnodes: " + vnodes);
                out.println("# nodes: " + String.join(" ", nodes));
                out.println("# added: " + f[3]);
                out.println("# removed: " + f[4]);
                for (String hex : keys) {
                    out.println(hex + "\t" + lb.select(new String(unhex(hex), StandardCharsets.UTF_8)));
                }
            }
        }
    }
}
