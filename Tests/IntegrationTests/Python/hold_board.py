"""A board that keeps every command it is sent unanswered (echo_board.serve): for the bounds on
what waits for a board."""
import echo_board

if __name__ == "__main__":
    echo_board.serve(["hold"], lambda message, payload: None)
