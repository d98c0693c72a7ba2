//! The import graph between the files of one crate, read with `syn`: an edge
//! runs from a file to each file whose items its code names.
//!
//! What counts as naming: a path in the code (`crate::a::B`, `super::b`, or a
//! name brought in by a `use`), and a private `use`. A `pub use` only
//! re-exports: a name reached through it resolves to the file that defines
//! the item. Unit tests (`#[cfg(test)]`) are left out, and so are the edges
//! between a module's root file (`mod.rs`, `lib.rs`) and the files of its
//! own submodules: the root declares what they share and assembles them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

type ModPath = Vec<String>;

/// One module: the file it is written in and the names its `use` items
/// bring in, each as the absolute path it stands for.
#[derive(Default)]
struct Module {
    file: PathBuf,
    /// Each name a `use` binds, and the path as written.
    uses: Vec<(String, ModPath)>,
    aliases: HashMap<String, ModPath>,
}

/// A crate's modules, and which files name which.
pub struct Graph {
    root: PathBuf,
    modules: BTreeMap<ModPath, Module>,
    /// For each file (relative to the crate's `src`), the files it names,
    /// each with the first path that names it.
    pub edges: BTreeMap<PathBuf, BTreeMap<PathBuf, String>>,
}

/// Whether an item is compiled only for unit tests or for the docs (an
/// import for a doc link names nothing the code uses).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Meta>()
                .is_ok_and(|meta| meta.path().is_ident("test") || meta.path().is_ident("doc"))
    })
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The absolute module path a path written in module `at` starts from, and
/// the rest of it; `None` for a path that does not start in this crate.
fn absolute(at: &[String], segments: &[String]) -> Option<ModPath> {
    let (first, rest) = segments.split_first()?;
    let mut base: ModPath = match first.as_str() {
        "crate" => Vec::new(),
        "self" => at.to_vec(),
        "super" => at[..at.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    let mut rest = rest;
    while let Some(("super", tail)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
        base.pop()?;
        rest = tail;
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Each leaf of a `use` tree: the name it binds and the path it names.
fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(String, ModPath)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                if let Some(last) = prefix.last() {
                    out.push((last.clone(), prefix.clone()));
                }
            } else {
                let mut path = prefix.clone();
                path.push(name.clone());
                out.push((name, path));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            path.push(r.ident.to_string());
            out.push((r.rename.to_string(), path));
        }
        syn::UseTree::Glob(_) => out.push(("*".to_owned(), prefix.clone())),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_leaves(tree, prefix, out);
            }
        }
    }
}

impl Graph {
    /// Reads the crate whose root file is `src/lib.rs` under `root`.
    pub fn read(root: &Path) -> Graph {
        let mut graph = Graph {
            root: root.to_owned(),
            modules: BTreeMap::new(),
            edges: BTreeMap::new(),
        };
        let mut files = Vec::new();
        graph.load(Vec::new(), root.join("lib.rs"), &mut files);
        // A `use` path may start at a child module, or at a name another
        // `use` of the same module binds: resolved once every module is known.
        let paths: Vec<ModPath> = graph.modules.keys().cloned().collect();
        for at in paths {
            let uses = std::mem::take(&mut graph.modules.get_mut(&at).expect("known").uses);
            for (name, path) in &uses {
                if let Some(target) = graph.anchor(&at, path, &uses) {
                    let module = graph.modules.get_mut(&at).expect("known");
                    module.aliases.insert(name.clone(), target);
                }
            }
        }
        let roots: HashMap<PathBuf, ModPath> = files
            .iter()
            .filter(|(_, file, _)| {
                file.file_stem()
                    .is_some_and(|stem| stem == "mod" || stem == "lib")
            })
            .map(|(at, file, _)| {
                (
                    file.strip_prefix(root).expect("under src").to_owned(),
                    at.clone(),
                )
            })
            .collect();
        let module_of: HashMap<PathBuf, ModPath> = files
            .iter()
            .map(|(at, file, _)| {
                (
                    file.strip_prefix(root).expect("under src").to_owned(),
                    at.clone(),
                )
            })
            .collect();
        // Whether `a` is the root file of a module that `b` is inside of.
        let encloses = |a: &PathBuf, b: &PathBuf| {
            roots
                .get(a)
                .is_some_and(|outer| module_of[b].starts_with(outer))
        };
        for (at, file, ast) in &files {
            let mut refs = References {
                graph: &graph,
                at: at.clone(),
                named: BTreeMap::new(),
            };
            refs.visit_items(&ast.items);
            let from = file.strip_prefix(root).expect("under src").to_owned();
            let named = refs.named;
            graph.edges.entry(from.clone()).or_default().extend(
                named
                    .into_iter()
                    .filter(|(to, _)| *to != from && !encloses(to, &from) && !encloses(&from, to)),
            );
        }
        graph
    }

    fn load(&mut self, at: ModPath, file: PathBuf, files: &mut Vec<(ModPath, PathBuf, syn::File)>) {
        let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let dir = file.parent().expect("a directory").to_owned();
        let stem = file
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let children_dir = if stem == "mod" || stem == "lib" {
            dir.clone()
        } else {
            dir.join(&stem)
        };
        self.module_items(&at, &file, &dir, &children_dir, &ast.items, files);
        files.push((at, file, ast));
    }

    fn module_items(
        &mut self,
        at: &ModPath,
        file: &Path,
        dir: &Path,
        children_dir: &Path,
        items: &[syn::Item],
        files: &mut Vec<(ModPath, PathBuf, syn::File)>,
    ) {
        self.modules.entry(at.clone()).or_default().file = file.to_owned();
        for item in items {
            match item {
                syn::Item::Mod(m) if !is_test_only(&m.attrs) => {
                    let mut child = at.clone();
                    child.push(m.ident.to_string());
                    if let Some((_, items)) = &m.content {
                        let nested = children_dir.join(m.ident.to_string());
                        self.module_items(&child, file, dir, &nested, items, files);
                    } else {
                        let path = match path_attr(&m.attrs) {
                            Some(p) => dir.join(p),
                            None => {
                                let flat = children_dir.join(format!("{}.rs", m.ident));
                                if flat.exists() {
                                    flat
                                } else {
                                    children_dir.join(m.ident.to_string()).join("mod.rs")
                                }
                            }
                        };
                        self.load(child, path, files);
                    }
                }
                syn::Item::Use(u) if !is_test_only(&u.attrs) => {
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                    let module = self.modules.entry(at.clone()).or_default();
                    module.uses.extend(leaves);
                }
                _ => {}
            }
        }
    }

    /// The absolute form of a path written in a `use` of module `at`.
    fn anchor(&self, at: &ModPath, path: &[String], uses: &[(String, ModPath)]) -> Option<ModPath> {
        if let Some(target) = absolute(at, path) {
            return Some(target);
        }
        let (first, rest) = path.split_first()?;
        let mut child = at.clone();
        child.push(first.clone());
        if self.modules.contains_key(&child) {
            child.extend(rest.iter().cloned());
            return Some(child);
        }
        let (_, bound) = uses
            .iter()
            .find(|(name, p)| name == first && p.as_slice() != path)?;
        let mut target = absolute(at, bound)?;
        target.extend(rest.iter().cloned());
        Some(target)
    }

    /// The file that defines what an absolute path names.
    fn resolve(&self, path: &[String], depth: usize) -> Option<PathBuf> {
        let mut at: ModPath = Vec::new();
        for (i, segment) in path.iter().enumerate() {
            let mut child = at.clone();
            child.push(segment.clone());
            if self.modules.contains_key(&child) {
                at = child;
                continue;
            }
            let module = self.modules.get(&at)?;
            if let Some(target) = module.aliases.get(segment)
                && depth < 16
                && *target != path[..=i]
            {
                let mut next = target.clone();
                next.extend(path[i + 1..].iter().cloned());
                return self.resolve(&next, depth + 1);
            }
            return Some(module.file.clone());
        }
        self.modules.get(&at).map(|m| m.file.clone())
    }
}

struct References<'g> {
    graph: &'g Graph,
    at: ModPath,
    named: BTreeMap<PathBuf, String>,
}

impl References<'_> {
    fn name(&mut self, absolute: &[String]) {
        if let Some(file) = self.graph.resolve(absolute, 0) {
            let relative = file.strip_prefix(&self.graph.root).expect("under src");
            self.named
                .entry(relative.to_owned())
                .or_insert_with(|| absolute.join("::"));
        }
    }

    fn visit_items(&mut self, items: &[syn::Item]) {
        for item in items {
            self.visit_item(item);
        }
    }
}

impl<'ast> Visit<'ast> for References<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            _ => &[],
        };
        if is_test_only(attrs) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    // `pub(super)` names no item.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if let Some((_, items)) = &m.content {
            self.at.push(m.ident.to_string());
            self.visit_items(items);
            self.at.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        // A re-export is an alias, resolved where it is used.
        if !matches!(u.vis, syn::Visibility::Inherited) {
            return;
        }
        let mut leaves = Vec::new();
        use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
        for (name, path) in leaves {
            let target = absolute(&self.at, &path).or_else(|| {
                let module = self.graph.modules.get(&self.at)?;
                module.aliases.get(&name).cloned()
            });
            if let Some(target) = target {
                self.name(&target);
            }
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        let target = absolute(&self.at, &segments).or_else(|| {
            let module = self.graph.modules.get(&self.at)?;
            let (first, rest) = segments.split_first()?;
            let mut target = module.aliases.get(first)?.clone();
            target.extend(rest.iter().cloned());
            Some(target)
        });
        if let Some(target) = target {
            self.name(&target);
        }
        syn::visit::visit_path(self, path);
    }
}

/// The groups of files that import one another (strongly connected
/// components of more than one file), each sorted.
pub fn circles(edges: &BTreeMap<PathBuf, BTreeMap<PathBuf, String>>) -> Vec<Vec<PathBuf>> {
    // Tarjan's algorithm, written recursively: a crate's files are few.
    struct State<'e> {
        edges: &'e BTreeMap<PathBuf, BTreeMap<PathBuf, String>>,
        index: HashMap<&'e PathBuf, usize>,
        low: HashMap<&'e PathBuf, usize>,
        stack: Vec<&'e PathBuf>,
        on_stack: BTreeSet<&'e PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn connect<'e>(s: &mut State<'e>, v: &'e PathBuf) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flat_map(|to| to.keys()) {
            let Some((w, _)) = s.edges.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                connect(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                group.push(w.clone());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.out.push(group);
            }
        }
    }
    let mut s = State {
        edges,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            connect(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}
