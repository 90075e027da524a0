// The article-style Java ketama of the project's background, written out so that it can be run: a
// TreeMap of points, 160 virtual nodes a node, MD5("<node>&&<i>") cut into four little-endian words,
// and a lookup that takes the first point at or after MD5(key)'s first word, else the first point.
//
// It is kept as such code is found in the wild, bugs included (each marked BUG; the template ring
// reproduces the constructor and select, and testdata/template/README.md says what the bugs do):
// addNode numbers every digest 0, removeNode removes points another node owns after a collision,
// getBytes() uses the platform's default charset, and select on an empty ring throws.
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

public class ConsistentHashLoadBalance {
    private final TreeMap<Long, String> virtualNodes = new TreeMap<>();
    private final int replicaNumber;

    public ConsistentHashLoadBalance(List<String> nodes, int replicaNumber) {
        this.replicaNumber = replicaNumber;
        for (String node : nodes) {
            for (int i = 0; i < replicaNumber / 4; i++) {
                byte[] digest = md5(node + "&&" + i);
                for (int h = 0; h < 4; h++) {
                    // put overwrites: of two nodes on one point, the one added later keeps it.
                    virtualNodes.put(hash(digest, h), node);
                }
            }
        }
    }

    public void addNode(String node) {
        for (int i = 0; i < replicaNumber / 4; i++) {
            // BUG: "&&" + 0 where the constructor has "&&" + i: the new node gets one digest, 4 points.
            byte[] digest = md5(node + "&&" + 0);
            for (int h = 0; h < 4; h++) {
                virtualNodes.put(hash(digest, h), node);
            }
        }
    }

    public void removeNode(String node) {
        for (int i = 0; i < replicaNumber / 4; i++) {
            byte[] digest = md5(node + "&&" + i);
            for (int h = 0; h < 4; h++) {
                // BUG: removes the point whoever owns it (after a collision, another node).
                virtualNodes.remove(hash(digest, h));
            }
        }
    }

    public String select(String key) {
        byte[] digest = md5(key);
        Map.Entry<Long, String> entry = virtualNodes.ceilingEntry(hash(digest, 0));
        if (entry == null) {
            // Past the last point: wrap to the first. BUG: on an empty ring this is null too.
            entry = virtualNodes.firstEntry();
        }
        return entry.getValue();
    }

    private static long hash(byte[] digest, int number) {
        return (((long) (digest[3 + number * 4] & 0xFF) << 24)
                | ((long) (digest[2 + number * 4] & 0xFF) << 16)
                | ((long) (digest[1 + number * 4] & 0xFF) << 8)
                | (digest[number * 4] & 0xFF))
                & 0xFFFFFFFFL;
    }

    private static byte[] md5(String value) {
        try {
            MessageDigest md5 = MessageDigest.getInstance("MD5");
            // BUG: getBytes() without a charset: the platform default (UTF-8 only where it is so).
            return md5.digest(value.getBytes());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
