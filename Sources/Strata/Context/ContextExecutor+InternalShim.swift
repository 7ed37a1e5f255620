// TEMPORARY until the waits branch lands.
extension ContextExecutor {
    func runInternalRequest<T>(_ body: () throws -> T) throws -> T {
        try runAndWait(body)
    }
}
