/* The pod sandbox's process (upstream build/pause/linux/pause.c does the same): sleep until a signal
 * ends it, reaping the zombies of a shared PID namespace. Built static by scripts/images.sh. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) { _exit(0); }

static void on_child(int sig) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        printf("pause (rkube)\n");
        return 0;
    }
    if (getpid() != 1)
        fprintf(stderr, "Warning: pause should be the first process\n");
    struct sigaction term = {.sa_handler = on_term};
    sigaction(SIGINT, &term, NULL);
    sigaction(SIGTERM, &term, NULL);
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGCHLD, &child, NULL);
    for (;;)
        pause();
    return 42;
}
