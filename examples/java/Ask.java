// ask: load a model, read a (long) text file, ask a question, stream the answer.
// usage: java -cp lctx.jar examples/java/Ask.java MODEL.gguf FILE.txt "question" [max_tokens]
//
// The session uses the library's default method, REFORM, so FILE.txt may be
// far longer than the model's trained context (examples/make_haystack.py
// writes one). Progress goes to stderr with the stage of each long call.
import java.nio.file.Files;
import java.nio.file.Path;
import org.lctx.Conversation;
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
        Session.Params params = new Session.Params().onProgress((stage, done) -> {   // method: REFORM
            System.err.printf("\r%s %3.0f%%%s", stage, 100 * done, done >= 1 ? "\n" : "");
            return false;   // true would cancel
        });
        try (Model model = new Model(args[0]); Session session = model.newSession(params)) {
            Conversation chat = new Conversation(session, true);   // the model's chat template, history kept
            int n = chat.feedText(document);
            System.err.printf("ask: %d tokens (trained context %d)%n", n, model.nCtxTrain());
            chat.ask(args[2], maxTokens, null, piece -> {
                System.out.print(piece);
                System.out.flush();
            });
            System.out.println();
        } catch (LctxException e) {
            System.err.println("ask: " + e.getMessage() + " (" + e.kind().kind() + ")");
            System.exit(1);
        }
    }
}
