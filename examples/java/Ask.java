// ask: load a model, read a text file, ask a question, stream the answer.
// usage: java -cp lctx.jar examples/java/Ask.java MODEL.gguf FILE.txt "question" [max_tokens]
import java.nio.file.Files;
import java.nio.file.Path;
import org.lctx.LctxException;
import org.lctx.Model;
import org.lctx.Session;

public class Ask {
    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: Ask MODEL.gguf FILE.txt \"question\" [max_tokens]");
            System.exit(2);
        }
        String document = Files.readString(Path.of(args[1]));
        int maxTokens = args.length > 3 ? Integer.parseInt(args[3]) : 128;
        try (Model model = new Model(args[0]); Session session = model.newSession()) {
            String[] parts = model.promptParts();
            session.feed(model.tokenize(parts[0] + document, true, true));
            session.ask("\n\n" + args[2] + parts[1], maxTokens, null, piece -> {
                System.out.print(piece);
                System.out.flush();
            });
            System.out.println();
        } catch (LctxException e) {
            System.err.println("ask: " + e.getMessage());
            System.exit(1);
        }
    }
}
