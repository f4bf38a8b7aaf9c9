// The PostgreSQL JDBC driver against tabos's PostgreSQL protocol (issue 21,
// item 1): a prepared statement with a parameter, a plain statement, and
// DatabaseMetaData's table and column listings (what SQL tools and
// Grafana-like pickers call). Prints what it saw; the Rust test checks it.
// Usage: java -cp postgresql.jar:. TabosJdbc PORT USER PASSWORD
import java.sql.*;

public class TabosJdbc {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/tabos";
        try (Connection c = DriverManager.getConnection(url, args[1], args[2])) {
            try (PreparedStatement ps =
                    c.prepareStatement("SELECT pid, state, exit_status FROM proc WHERE pid = ?")) {
                ps.setString(1, "j1");
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) {
                        System.out.println("proc " + rs.getString(1) + " " + rs.getString(2)
                                + " " + rs.getLong(3));
                    }
                }
            }
            try (Statement s = c.createStatement();
                    ResultSet rs = s.executeQuery("SELECT 41 + 1 AS n, 'x' AS t")) {
                rs.next();
                System.out.println("select " + rs.getLong("n") + " " + rs.getString("t"));
            }
            DatabaseMetaData md = c.getMetaData();
            boolean proc = false;
            try (ResultSet rs = md.getTables(null, "public", "%", new String[] {"TABLE"})) {
                while (rs.next()) {
                    proc |= rs.getString("TABLE_NAME").equals("proc");
                }
            }
            System.out.println("tables have proc " + proc);
            int columns = 0;
            String pidNullable = "?";
            try (ResultSet rs = md.getColumns(null, "public", "proc", "%")) {
                while (rs.next()) {
                    String name = rs.getString("COLUMN_NAME");
                    columns += name.equals("exit_status") ? 1 : 0;
                    if (name.equals("pid")) {
                        pidNullable = rs.getString("IS_NULLABLE");
                    }
                }
            }
            System.out.println("columns have exit_status " + (columns == 1));
            System.out.println("pid nullable " + pidNullable);
            StringBuilder key = new StringBuilder();
            try (ResultSet rs = md.getPrimaryKeys(null, "public", "proc")) {
                while (rs.next()) {
                    key.append(' ').append(rs.getString("COLUMN_NAME"));
                }
            }
            System.out.println("proc key" + key);
            try (Statement s = c.createStatement()) {
                s.executeUpdate("DELETE FROM proc");
                System.out.println("delete was not refused");
            } catch (SQLException e) {
                System.out.println("delete refused " + e.getSQLState());
            }
        }
    }
}
