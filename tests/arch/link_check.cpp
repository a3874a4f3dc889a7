// Linked with every object of one engine part and nothing but what that part's target
// links: a part that calls into a library above it (engine/core into ipc/, say) fails
// to build here, whatever its #include lines say.
int main() { return 0; }
