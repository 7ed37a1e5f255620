import Foundation
@testable import Strata
import Testing

/// The world of the merge-policy tests: note "a" (priority 1) in folder Inbox, tagged
/// red; folders Work and Later; tags green and blue. The saving side and the other side
/// each change note "a" after the saving side read it.
enum MergeWorld {
    /// Which property the two sides change.
    enum Property: String, CaseIterable, Sendable, CustomStringConvertible {
        /// `title`.
        case attribute
        /// `folder` (many-to-one; its inverse is Folder.notes).
        case toOne
        /// `tags` (many-to-many; its inverse is Tag.notes).
        case toMany
        var description: String { rawValue }
    }

    /// Whether the other side changes the same property (both) or another one (`priority`).
    enum Sides: String, CaseIterable, Sendable, CustomStringConvertible {
        case oneSide, bothSides
        var description: String { rawValue }
    }

    /// The saved state of note "a" and of the inverses, as a reader sees it.
    struct State: Equatable, CustomStringConvertible {
        var title: String
        var priority: Int16
        var folder: String
        var tags: [String]
        /// Each folder's note titles and each tag's note titles (the inverse sides).
        var inverses: [String]

        var description: String { "\(title) p\(priority) in \(folder) tags \(tags) inverses \(inverses)" }
    }

    static func coordinator() async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "setup").perform { context in
            var folders: [String: Folder] = [:]
            for name in ["Inbox", "Work", "Later"] {
                let folder = Folder()
                folder.name = name
                try context.insert(folder)
                folders[name] = folder
            }
            var tags: [String: Tag] = [:]
            for label in ["red", "green", "blue"] {
                let tag = Tag()
                tag.label = label
                try context.insert(tag)
                tags[label] = tag
            }
            let note = Note()
            note.title = "a"
            note.priority = 1
            try context.insert(note)
            note.folder = folders["Inbox"]
            note.tags = [tags["red"]!]
            try context.save()
        }
        return coordinator
    }

    /// The object named `name` (a note's title, a folder's name or a tag's label).
    static func named<T: ManagedObject>(_ type: T.Type, _ name: String, in context: isolated ManagedObjectContext) throws -> T {
        var request = FetchRequest<T>()
        let key = T.self == Folder.self ? "name" : T.self == Tag.self ? "label" : "title"
        request.predicate = try FetchPredicate(format: "\(key) == %@", name)
        return try #require(try context.fetch(request).first)
    }

    /// Reads note "a" and every folder and tag with their relationships, keeping them
    /// registered (the saving side's read); note "a"'s ID.
    static func readEverything(in context: isolated ManagedObjectContext) throws -> ManagedObjectID {
        context.retainsRegisteredObjects = true
        let note = try named(Note.self, "a", in: context)
        _ = note.tags.count
        _ = note.folder?.notes.count
        for tag in try context.fetch(FetchRequest<Tag>()) { _ = tag.notes.count }
        for folder in try context.fetch(FetchRequest<Folder>()) { _ = folder.notes.count }
        return note.objectID
    }

    /// Note "a" (by ID), with its to-many relationships loaded.
    static func note(_ id: ManagedObjectID, in context: isolated ManagedObjectContext) throws -> Note {
        let note = try #require(try context.existingObject(with: id) as? Note)
        _ = note.tags.count
        _ = note.folder?.notes.count
        return note
    }

    /// The other side's change: the same property as the saving side's (to another
    /// value), or `priority` only.
    static func otherChange(_ property: Property, _ sides: Sides, to note: Note, in context: isolated ManagedObjectContext) throws {
        guard sides == .bothSides else {
            note.priority = 2
            return
        }
        switch property {
        case .attribute: note.title = "theirs"
        case .toOne: note.folder = try named(Folder.self, "Later", in: context)
        case .toMany: note.tags.insert(try named(Tag.self, "blue", in: context))
        }
    }

    /// The saving side's change.
    static func ownChange(_ property: Property, to note: Note, in context: isolated ManagedObjectContext) throws {
        switch property {
        case .attribute: note.title = "mine"
        case .toOne: note.folder = try named(Folder.self, "Work", in: context)
        case .toMany: note.tags.insert(try named(Tag.self, "green", in: context))
        }
    }

    /// Note `id`'s state in `context`, and the inverse sides as its objects hold them.
    static func state(of id: ManagedObjectID, in context: isolated ManagedObjectContext) throws -> State {
        let note = try #require(try context.existingObject(with: id) as? Note)
        var inverses: [String] = []
        var request = FetchRequest<Folder>()
        request.sortDescriptors = [FetchSortDescriptor(key: "name")]
        for folder in try context.fetch(request) {
            inverses.append("\(folder.name): \(folder.notes.map(\.title).sorted())")
        }
        var tags = FetchRequest<Tag>()
        tags.sortDescriptors = [FetchSortDescriptor(key: "label")]
        for tag in try context.fetch(tags) {
            inverses.append("\(tag.label): \(tag.notes.map(\.title).sorted())")
        }
        return State(
            title: note.title, priority: note.priority, folder: note.folder?.name ?? "-", tags: note.tags.map(\.label).sorted(),
            inverses: inverses)
    }

    /// The state a fresh context reads from the store.
    static func stored(_ id: ManagedObjectID, on coordinator: PersistentStoreCoordinator) async throws -> State {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "reader").perform { context in
            try state(of: id, in: context)
        }
    }

    /// The inverse sides of a state where note `title` (whose title may differ) is in
    /// `folder` with `tags`.
    static func inverses(title: String, folder: String, tags: [String]) -> [String] {
        ["Inbox", "Later", "Work"].map { "\($0): \($0 == folder ? [title] : [])" }
            + ["blue", "green", "red"].map { "\($0): \(tags.contains($0) ? [title] : [])" }
    }

    /// What the saved state must be after the saving side's save under `policy`; nil when
    /// the save must fail.
    ///
    /// A property changed on one side only is no conflict under any merging policy (and,
    /// at a child's save, under `.error` either: the parent's check is per property); at a
    /// child's save under `.error`, member changes of a to-many relationship never conflict.
    static func expected(_ policy: MergePolicy, _ property: Property, _ sides: Sides, child: Bool = false) -> State? {
        var policy = policy
        if case .error = policy, child, sides == .oneSide || property == .toMany {
            policy = .mergeByPropertyObjectTrump   // no conflict: both sides' changes are taken
        }
        // The three candidate values of the property: the original, the other side's, the saving side's.
        let original: (title: String, folder: String, tags: [String]) = ("a", "Inbox", ["red"])
        var theirs = original
        var mine = original
        switch property {
        case .attribute: mine.title = "mine"; if sides == .bothSides { theirs.title = "theirs" }
        case .toOne: mine.folder = "Work"; if sides == .bothSides { theirs.folder = "Later" }
        case .toMany: mine.tags = ["green", "red"]; if sides == .bothSides { theirs.tags = ["blue", "red"] }
        }
        let theirPriority: Int16 = sides == .oneSide ? 2 : 1
        let merged: (title: String, folder: String, tags: [String])
        let priority: Int16
        switch policy {
        case .error:
            return nil
        case .mergeByPropertyObjectTrump:
            merged = property == .toMany ? (mine.title, mine.folder, Array(Set(mine.tags + theirs.tags)).sorted()) : mine
            priority = theirPriority
        case .mergeByPropertyStoreTrump:
            // A changed property the other side did not change keeps the saving side's
            // value; tags merge member by member on both.
            if property == .toMany {
                merged = (mine.title, mine.folder, Array(Set(mine.tags + theirs.tags)).sorted())
            } else {
                merged = sides == .bothSides ? theirs : mine
            }
            priority = theirPriority
        case .overwrite:
            merged = mine
            priority = theirPriority
        case .rollback:
            merged = sides == .oneSide ? mine : theirs
            priority = theirPriority
        case .custom:
            return nil
        }
        return State(
            title: merged.title, priority: priority, folder: merged.folder, tags: merged.tags,
            inverses: inverses(title: merged.title, folder: merged.folder, tags: merged.tags))
    }
}
