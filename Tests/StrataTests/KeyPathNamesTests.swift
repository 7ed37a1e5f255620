import Foundation
import Testing
@testable import Strata

extension Note {
    /// A computed property of plain Swift: not usable in a query.
    var summary: String { title + (body ?? "") }
    /// A computed property of one stored one, transformed.
    var shouted: String { title.uppercased() + "!" }
    /// A computed property of one stored one, unchanged.
    var sameTitle: String { title }
}

@Suite("Key path names")
struct KeyPathNamesTests {
    @Test("a stored property's key path names it")
    func attribute() throws {
        #expect(try KeyPathNames.components(of: \Note.title) == ["title"])
        #expect(try KeyPathNames.components(of: \Note.priority) == ["priority"])
        #expect(try KeyPathNames.components(of: \Note.tags) == ["tags"])
        #expect(try KeyPathNames.components(of: \Book.title) == ["title"])
        #expect(try KeyPathNames.components(of: \Book.pages) == ["pages"])
    }

    @Test("a key path through to-one relationships names every step")
    func throughToOne() throws {
        #expect(try KeyPathNames.components(of: \Note.folder?.name) == ["folder", "name"])
        #expect(try KeyPathNames.components(of: \Note.folder) == ["folder"])
        #expect(try KeyPathNames.components(of: \Passport.holder?.passport?.number) == ["holder", "passport", "number"])
    }

    @Test("a to-many relationship's count is @count")
    func count() throws {
        #expect(try KeyPathNames.components(of: \Note.tags.count) == ["tags", "@count"])
        #expect(try KeyPathNames.components(of: \Note.folder?.notes.count) == ["folder", "notes", "@count"])
    }

    @Test("a computed property that returns one stored property unchanged is that property")
    func passThrough() throws {
        #expect(try KeyPathNames.components(of: \Note.sameTitle) == ["title"])
    }

    @Test("objectID is SELF")
    func objectID() throws {
        #expect(try KeyPathNames.components(of: \Note.objectID) == ["SELF"])
    }

    @Test("a key path whose root class is known only at run time")
    func runtimeRootClass() throws {
        let noteClass: ManagedObject.Type = Note.self
        let bookClass: ManagedObject.Type = Book.self
        #expect(try KeyPathNames.components(of: \Note.folder?.name as AnyKeyPath, rootClass: noteClass) == ["folder", "name"])
        #expect(try KeyPathNames.components(of: \Note.tags.count as AnyKeyPath, rootClass: noteClass) == ["tags", "@count"])
        #expect(try KeyPathNames.components(of: \Book.pages as AnyKeyPath, rootClass: bookClass) == ["pages"])
        #expect(throws: FetchPredicateError.self) { try KeyPathNames.components(of: \Note.title as AnyKeyPath, rootClass: Folder.self) }
    }

    @Test("computed properties and unrelated key paths are refused")
    func refused() {
        #expect(throws: FetchPredicateError.self) { try KeyPathNames.components(of: \Note.summary) }
        #expect(throws: FetchPredicateError.self) { try KeyPathNames.components(of: \Note.hasChanges) }
        #expect(throws: FetchPredicateError.self) { try KeyPathNames.components(of: \Note.title.count) }
        #expect(throws: FetchPredicateError.self) { try KeyPathNames.components(of: \Note.shouted) }
        #expect(throws: FetchPredicateError.self) { try KeyPathNames.components(of: \Note.tags.first) }
        #expect(throws: FetchPredicateError.self) { try KeyPathNames.components(of: \Note.folder?.notes.first?.title) }
    }
}
